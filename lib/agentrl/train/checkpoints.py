"""Periodic checkpoints and resuming, shared by SFT and GRPO, and the one gradient-checkpointing rule.

A checkpoint is the Trainer's ``<run>/trainer/checkpoint-<step>/``: the LoRA adapter, optimizer and
scheduler state, every RNG state and ``trainer_state.json`` (step, log history). The Trainer writes
``trainer_state.json`` last, so a directory without it was cut off mid-write (a Colab disconnect, a
SIGKILL) and is never resumed from. ``--resume`` continues from the newest complete one; a run without
``--resume`` removes the old ones first, so a later resume cannot pick up a checkpoint of an earlier run.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def save_args(save_steps: int, save_total_limit: int) -> dict:
    """Return the TrainingArguments fields for a checkpoint every ``save_steps`` steps (0 = none)."""
    if save_steps < 0 or save_total_limit < 1:
        from agentrl.io import DataError

        raise DataError(f"save_steps must be >= 0 and save_total_limit >= 1 (got {save_steps}, {save_total_limit})")
    if not save_steps:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": save_steps, "save_total_limit": save_total_limit}


def checkpoints(trainer_dir: str | Path) -> list[Path]:
    """Return the complete checkpoints under ``trainer_dir`` (those with trainer_state.json), oldest first."""
    root = Path(trainer_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if p.is_dir() and (m := _CHECKPOINT.match(p.name)) and (p / "trainer_state.json").is_file()]
    return [p for _, p in sorted(found)]


def prepare(trainer_dir: str | Path, resume: bool) -> Path | None:
    """Return the checkpoint to resume from (the newest complete one) when ``resume``, else remove every old
    checkpoint of the run and return None. Resuming without any checkpoint starts from scratch, with a log line."""
    found = checkpoints(trainer_dir)
    if resume:
        if found:
            log.info("resuming from %s", found[-1])
            return found[-1]
        log.warning("--resume: no complete checkpoint under %s; starting from scratch", trainer_dir)
        return None
    root = Path(trainer_dir)
    stale = [p for p in root.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)] if root.is_dir() else []
    for p in stale:
        shutil.rmtree(p)
    if stale:
        log.info("removed %d checkpoint(s) of an earlier run under %s (pass --resume to continue one)",
                 len(stale), root)
    return None


def fsdp_activation_checkpointing() -> bool:
    """Return True when ``accelerate launch`` runs FSDP with its own activation checkpointing (the
    ``fsdp_activation_checkpointing`` field of the accelerate config, exported as FSDP_ACTIVATION_CHECKPOINTING)."""
    def on(name: str) -> bool:
        return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")

    return on("ACCELERATE_USE_FSDP") and on("FSDP_ACTIVATION_CHECKPOINTING")


def gradient_checkpointing(requested: bool) -> bool:
    """Return the Trainer's ``gradient_checkpointing``: ``requested``, except under FSDP activation checkpointing,
    which already recomputes each layer (transformers' Trainer refuses both at once, and FSDP's own is the one
    without a redundant all-gather in the backward pass)."""
    if requested and fsdp_activation_checkpointing():
        log.info("gradient checkpointing: FSDP's activation checkpointing does it (trainer flag off)")
        return False
    return requested
