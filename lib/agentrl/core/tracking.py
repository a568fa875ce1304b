"""Experiment tracking: which of a run's ``report_to`` trackers are installed, and TensorBoard scalars for runs
the Trainer does not log (phase-01 evaluations).

TRL's ``report_to`` takes "tensorboard" (the default of every preset: it ships with the environment), "trackio" and
"wandb"; a tracker that is asked for but not installed is dropped with one line saying how to get it, instead of
transformers' error at the first step.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

INSTALL = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}


def trackers(report_to: list[str] | str | None) -> list[str]:
    """Return the trackers of ``report_to`` that are installed ("none"/empty: []); print one line per one that
    is not."""
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    out = []
    for name in wanted:
        if name in ("none", "", None):
            continue
        module = INSTALL.get(name, name)
        if importlib.util.find_spec(module) is None:
            print(f"report_to: {name} is not installed (pip install {module}); the run logs without it")
            continue
        out.append(name)
    return out


def log_scalars(logdir: str | Path, scalars: dict, step: int) -> bool:
    """Append the numeric ``scalars`` at ``step`` to a TensorBoard event file in ``logdir``; return False (and
    write nothing) when TensorBoard is not installed."""
    if importlib.util.find_spec("tensorboard") is None:
        return False
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    try:
        for key, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_scalar(key, float(value), step)
    finally:
        writer.close()
    return True
