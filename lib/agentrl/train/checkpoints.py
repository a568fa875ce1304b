"""Periodic checkpoints and resuming, shared by SFT and GRPO, and the rules that depend on how a run was launched
(gradient checkpointing, distributed launches).

A checkpoint is the Trainer's ``<run>/trainer/checkpoint-<step>/``: the LoRA adapter, optimizer and
scheduler state, every RNG state and ``trainer_state.json`` (step, log history). The Trainer writes
``trainer_state.json`` last, so a directory without it was cut off mid-write (a Colab disconnect, a
SIGKILL) and is never resumed from. ``--resume`` continues from the newest complete one. A run without
``--resume`` never deletes an earlier run's checkpoints silently: it moves them aside to
``<run>/trainer/earlier-<n>/`` (so a later ``--resume`` cannot pick them up, and nothing is lost), or deletes
them with ``--overwrite``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from pathlib import Path

from agentrl.core.io import DataError

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def save_args(save_steps: int, save_total_limit: int) -> dict:
    """Return the TrainingArguments fields for a checkpoint every ``save_steps`` steps (0 = none)."""
    if save_steps < 0 or save_total_limit < 1:
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


def prepare(trainer_dir: str | Path, resume: bool, overwrite: bool = False, extra: tuple[str, ...] = ()) -> Path | None:
    """Return the checkpoint to resume from (the newest complete one) when ``resume``; else clear the way for a
    fresh run and return None: an earlier run's checkpoints (and the files named in ``extra``, next to
    ``trainer_dir``) are moved to ``trainer_dir/earlier-<n>/``, or deleted when ``overwrite``. Resuming without
    any checkpoint starts from scratch, with a log line."""
    found = checkpoints(trainer_dir)
    if resume:
        if found:
            log.info("resuming from %s", found[-1])
            return found[-1]
        log.warning("--resume: no complete checkpoint under %s; starting from scratch", trainer_dir)
        return None
    root = Path(trainer_dir)
    stale = sorted(p for p in root.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)) if root.is_dir() else []
    if not stale:
        return None
    if overwrite:
        for p in stale:
            shutil.rmtree(p)
        _say(f"--overwrite: deleted {len(stale)} checkpoint(s) of an earlier run under {root}")
        return None
    n = 1
    while (root / f"earlier-{n}").exists():
        n += 1
    aside = root / f"earlier-{n}"
    aside.mkdir()
    for p in stale:
        p.rename(aside / p.name)
    for name in extra:
        if (root.parent / name).is_file():
            (root.parent / name).rename(aside / name)
    _say(f"kept {len(stale)} checkpoint(s) of an earlier run: moved to {aside} (pass --resume to continue a run, "
         f"--overwrite to delete them instead)")
    return None


def _say(message: str) -> None:
    # a printed line, not only a log record: notebooks and the CLI show stdout, and files moved must be visible
    print(message)
    log.info(message)


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def distributed_launch() -> str | None:
    """Return what kind of multi-process launch this process is part of ("FSDP2", "DeepSpeed", "DDP, 8 processes"),
    or None for a single process. ``accelerate launch`` exports ACCELERATE_USE_FSDP / FSDP_VERSION or
    ACCELERATE_USE_DEEPSPEED from its config; torchrun (which accelerate uses for DDP) sets WORLD_SIZE."""
    if _on("ACCELERATE_USE_FSDP"):
        return f"FSDP{os.environ.get('FSDP_VERSION', '1')}"
    if _on("ACCELERATE_USE_DEEPSPEED"):
        return "DeepSpeed"
    try:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        world = 1
    return f"DDP, {world} processes" if world > 1 else None


def end_distributed() -> bool:
    """Destroy the default process group if this process joined one; return True when it did.

    A rank that exits with its gloo group alive can abort (SIGABRT, "terminate called without an active
    exception"): gloo's worker threads are torn down during interpreter finalization. Each rank ends its own
    group without a barrier, so a main process still saving or checking does not hold the others."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    dist.destroy_process_group()
    return True


def fsdp() -> bool:
    """Return True when ``accelerate launch`` runs this process under FSDP."""
    return _on("ACCELERATE_USE_FSDP")


def fsdp_activation_checkpointing() -> bool:
    """Return True when ``accelerate launch`` runs FSDP with its own activation checkpointing (the
    ``fsdp_activation_checkpointing`` field of the accelerate config, exported as FSDP_ACTIVATION_CHECKPOINTING)."""
    return fsdp() and _on("FSDP_ACTIVATION_CHECKPOINTING")


def gradient_checkpointing(requested: bool, backend: str = "transformers") -> bool:
    """Return the Trainer's ``gradient_checkpointing`` for a model loaded on ``backend``.

    Unsloth: always False. Its checkpointing is chosen at load time (``use_gradient_checkpointing="unsloth"``,
    offloaded to CPU memory), as in Unsloth's own SFT and GRPO notebooks, whose configs never set the flag; its
    patched trainers then call ``model.for_training`` with the load-time choice. Transformers: ``requested``,
    except under FSDP activation checkpointing, which already recomputes each layer (transformers' Trainer
    refuses both at once, and FSDP's own is the one without a redundant all-gather in the backward pass)."""
    if backend == "unsloth":
        return False
    if requested and fsdp_activation_checkpointing():
        log.info("gradient checkpointing: FSDP's activation checkpointing does it (trainer flag off)")
        return False
    return requested
