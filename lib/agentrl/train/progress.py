"""Live progress of a training run instead of transformers' log printing.

:func:`attach_progress` takes transformers' PrinterCallback / ProgressCallback / NotebookProgressCallback off a
Trainer (a dict per ``logging_steps`` to stdout, or a tqdm bar that is off outside a TTY) and adds
:class:`LiveProgress`: the front end's progress bar and chart (agentrl.core.progress), the full per-step log as
``<run>/log.jsonl``, and :meth:`LiveProgress.record` for numbers the Trainer does not log itself (GRPO's held-out
evaluations), which go to the JSONL, the chart and the run's TensorBoard event file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from agentrl.core.progress import Progress

REPLACED = ("PrinterCallback", "ProgressCallback", "NotebookProgressCallback")  # transformers' printing callbacks


def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


def live_progress(title: str, log_path: Path, *, shown: tuple[str, ...], chart: tuple[str, ...]):
    """Return a LiveProgress callback (a transformers TrainerCallback) writing its JSONL to ``log_path``."""

    class LiveProgress(_callback_base()):
        def __init__(self):
            self.progress, self.trainer = None, None
            self.log_path = Path(log_path)

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                if not state.global_step:  # a fresh run: an earlier run's log is not this one's
                    self.log_path.unlink(missing_ok=True)
                self.progress = Progress(title, state.max_steps, shown=shown, chart=chart)
                self.progress.update(state.global_step)  # a resumed run starts where its checkpoint was

        def on_step_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.progress is None or not logs:
                return
            numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            self._append({"step": state.global_step, **numbers})
            self.progress.update(state.global_step, numbers)

        def on_train_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.close()

        def record(self, step: int, metrics: dict, prefix: str = "heldout") -> None:
            """Log ``metrics`` of ``step`` that the Trainer does not (an agent evaluation) as ``<prefix>/<key>``:
            the JSONL, the live chart, and TensorBoard's event file of the run."""
            if self.progress is None:
                return
            numbers = {f"{prefix}/{k}": float(v) for k, v in metrics.items()
                       if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
            self._append({"step": step, **numbers})
            if not self.progress.closed:
                self.progress.point(step, {k: v for k, v in numbers.items() if k.split("/", 1)[1] in ("f1", "acc")})
            for writer, own in tensorboard_writers(self.trainer):
                for key, value in numbers.items():
                    writer.add_scalar(key, value, step)
                writer.close() if own else writer.flush()

        def _append(self, row: dict) -> None:
            with self.log_path.open("a") as f:
                f.write(json.dumps({"time": round(time.time(), 3), **row}) + "\n")

    return LiveProgress()


def tensorboard_writers(trainer) -> list[tuple[object, bool]]:
    """Return ``(writer, opened_here)`` for each TensorBoard callback of ``trainer``: its SummaryWriter while
    training runs, else (after training, when the callback has closed it) a new writer on the same directory,
    which TensorBoard reads as the same run."""
    out = []
    for cb in trainer.callback_handler.callbacks if trainer is not None else ():
        if type(cb).__name__ != "TensorBoardCallback":
            continue
        if getattr(cb, "tb_writer", None) is not None:
            out.append((cb.tb_writer, False))
        elif getattr(cb, "logging_dir", None):
            from torch.utils.tensorboard import SummaryWriter

            out.append((SummaryWriter(log_dir=cb.logging_dir), True))
    return out


def attach_progress(trainer, title: str, out: Path, *, shown: tuple[str, ...], chart: tuple[str, ...]):
    """Replace transformers' printing/progress callbacks on ``trainer`` with a LiveProgress writing
    ``out/log.jsonl``; return it (its ``record`` logs extra numbers)."""
    # by name: transformers.utils.notebook imports IPython at its top, which a rented GPU box running the CLI lacks
    # (the Trainer adds its NotebookProgressCallback only inside a notebook, where IPython is there)
    for cb in list(trainer.callback_handler.callbacks):
        if type(cb).__name__ in REPLACED:
            trainer.remove_callback(cb)
    live = live_progress(title, Path(out) / "log.jsonl", shown=shown, chart=chart)
    live.trainer = trainer
    trainer.add_callback(live)
    return live
