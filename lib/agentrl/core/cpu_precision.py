"""Which precision CPU training and CPU generation use: bf16 only where this CPU has it and a measurement on this
machine showed it faster, fp32 otherwise.

``benchmarks/cpu_precision.py`` measures an SFT forward+backward and greedy generation in fp32 and bf16 and writes
``runs/precision/cpu.json`` (``{"cpu": ..., "train_bf16_speedup": x, "generate_bf16_speedup": y, ...}``). Without
that file nothing changes (fp32): an unmeasured machine is not assumed faster. ``model.cpu_precision`` (``auto``,
``bf16`` or ``fp32``) overrides the decision for training; ``AGENTRL_CPU_PRECISION`` does for both.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from agentrl.core.io import DataError

log = logging.getLogger(__name__)

CHOICES = ("auto", "bf16", "fp32")
MIN_SPEEDUP = 1.05  # below this a measured "gain" is noise
_REPO = Path(__file__).resolve().parents[3]


def measurement_path() -> Path:
    """Return where the measurement is cached: ``runs/precision/cpu.json`` of the working directory, else of the
    repository."""
    local = Path("runs/precision/cpu.json")
    return local if local.is_file() else _REPO / "runs" / "precision" / "cpu.json"


def cpu_has_bf16() -> bool:
    """Return whether this CPU computes bf16 natively (AVX512-BF16 or AMX)."""
    import torch

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:
        return False


def measured() -> dict | None:
    """Return the cached measurement, or None when there is none (or it is unreadable)."""
    try:
        return json.loads(measurement_path().read_text())
    except (OSError, ValueError):
        return None


_SAID: set[str] = set()


def choice(requested: str = "auto") -> str:
    """Return the precision asked for: the environment variable AGENTRL_CPU_PRECISION, else ``requested``, else
    "auto"; a value outside CHOICES is a DataError."""
    requested = os.environ.get("AGENTRL_CPU_PRECISION") or requested or "auto"
    if requested not in CHOICES:
        raise DataError(f"cpu precision must be one of {', '.join(CHOICES)} (got {requested!r})")
    return requested


def unmeasured_line(kind: str, requested: str = "auto") -> str | None:
    """Return the line that says CPU ``kind`` runs in fp32 only because bf16 was never measured here (the CPU has it,
    the setting is "auto", there is no measurement), once per process and kind; None otherwise or when said."""
    if choice(requested) != "auto" or kind in _SAID or measured() is not None or not cpu_has_bf16():
        return None
    _SAID.add(kind)
    return (f"CPU {kind} in fp32: this CPU has bf16 but it was never measured here ({measurement_path()} is missing); "
            "`uv run python benchmarks/cpu_precision.py` measures it (bf16 trained 2.05x faster on a 2-core EPYC, "
            "docs/results.md), or set model.cpu_precision = \"bf16\"")


def use_bf16(kind: str, requested: str = "auto") -> bool:
    """Return whether CPU ``kind`` ("train" or "generate") runs in bf16: ``requested`` (or the environment
    variable) "bf16" / "fp32" decides; "auto" takes bf16 when the CPU has it and the measurement shows it at least
    MIN_SPEEDUP times faster."""
    requested = choice(requested)
    if requested != "auto":
        return requested == "bf16"
    m = measured()
    if not m or not cpu_has_bf16():
        return False
    return float(m.get(f"{kind}_bf16_speedup") or 0) >= MIN_SPEEDUP
