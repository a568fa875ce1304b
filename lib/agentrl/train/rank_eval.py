"""Held-out evaluation inside a distributed training run, with every rank taking part.

Under ``accelerate launch`` a GRPO run evaluates its current policy with all ranks at once: each rank runs the agent
on its share of the held-out rows (``rows[rank::world]``) with a model it can generate with alone, without any
collective call: its own replica under DDP; under FSDP2 the same module with every FSDP unit unsharded for the
duration (full weights on each rank, resharded afterwards); under DeepSpeed ZeRO-3 the parameters gathered by TRL's
``unwrap_model_for_generation``. A rank that generated alone on a sharded model would wait in an all-gather the other
ranks never join: the deadlock this module removes. The trajectories are gathered to the main process, which writes
them with the metrics of all rows as one evaluation (``<out>/trajectories.jsonl``, ``metrics.json``,
``manifest.json``; each rank's own run stays in ``<out>/rank_<r>/``). A single process evaluates as before.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from agentrl.core.io import DataError, iter_jsonl, read_json, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.rollout.runner import TRAJECTORIES, finalize, summary
from agentrl.train.checkpoints import distributed_launch


def world() -> tuple[int, int]:
    """Return ``(rank, world size)`` of this process: ``(0, 1)`` outside a distributed run."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def main_decides(flag: bool) -> bool:
    """Return the main process's ``flag`` on every rank (a broadcast in a distributed run), so that all ranks take
    the same branch into a collective step such as :func:`evaluate_on_every_rank`."""
    rank, size = world()
    if size == 1:
        return flag
    import torch.distributed as dist

    box = [flag]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


def check_launch(eval_questions: int) -> None:
    """Raise DataError before training when held-out evaluation cannot run under this launch: FSDP1 cannot forward
    a unit outside its own forward (no rank can generate alone), FSDP2 can."""
    if eval_questions > 0 and distributed_launch() == "FSDP1":
        raise DataError("held-out evaluation during GRPO under FSDP1 cannot run: set fsdp_version: 2 in the accelerate "
                        "config (configs/accelerate/fsdp.yaml does), or grpo.eval_questions = 0")


def _reshards(module) -> bool:
    """Whether an FSDP2 module frees its unsharded parameters after forward (read from its parameter group)."""
    group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
    return group is not None and group.post_forward_mesh_info is not None


@contextmanager
def generating_alone(model, trainer=None):
    """Yield a model this rank can generate with on its own while the others generate on theirs: ``model`` itself in
    a single process or under DDP (the Trainer hands callbacks the unwrapped replica); under FSDP2 ``model`` with
    every FSDP unit unsharded and kept so through forwards until the context ends (collective on entry and exit:
    every rank must enter); otherwise, with a ``trainer``, TRL's ``unwrap_model_for_generation`` (DeepSpeed ZeRO-3
    gathers the parameters)."""
    if world()[1] == 1:
        yield model
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if units:
        before = [(m, _reshards(m)) for m in units]
        for m in units:  # the same order on every rank: each unshard is an all-gather
            m.unshard()
            m.set_reshard_after_forward(False, recurse=False)
        try:
            yield model
        finally:
            for m, reshard in before:
                m.set_reshard_after_forward(reshard, recurse=False)
                m.reshard()
        return
    if trainer is None:
        yield model
        return
    from trl.models.utils import unwrap_model_for_generation

    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as unwrapped:
        yield unwrapped


def evaluate_on_every_rank(run, rows: list[dict], out_dir: Path, model, trainer=None) -> dict | None:
    """Evaluate ``rows`` into ``out_dir`` with ``run(rows, out_dir, model)`` (an agent evaluation returning its
    metrics) and return the metrics of all rows on the main process, None on the others. A single process runs
    ``run`` once; in a distributed run every rank must call this: each runs its share with a model it generates with
    alone (:func:`generating_alone`), then the main process gathers every rank's trajectories and scores them."""
    rank, size = world()
    if size == 1:
        return run(rows, out_dir, model)
    import torch.distributed as dist

    share, own = rows[rank::size], out_dir / f"rank_{rank}"
    with generating_alone(model, trainer) as alone:
        if share:
            run(share, own, alone)
    mine = [r for _, r in iter_jsonl(own / "trajectories.jsonl")] if share else []
    gathered: list = [None] * size
    dist.all_gather_object(gathered, mine)
    if rank != 0:
        return None
    return _merge(out_dir, rows, [t for part in gathered for t in part], size)


def _merge(out_dir: Path, rows: list[dict], trajectories: list[dict], size: int) -> dict:
    """Write the ranks' trajectories as one evaluation of ``rows`` in ``out_dir`` (in row order) with its metrics and
    a manifest (rank 0's configuration, the counts of all ranks); return the metrics."""
    order = {r["id"]: i for i, r in enumerate(rows)}
    trajectories.sort(key=lambda t: order.get(t.get("id"), len(order)))
    write_jsonl(out_dir / TRAJECTORIES, trajectories)
    first = out_dir / "rank_0" / "manifest.json"
    config = read_json(first).get("config", {}) if first.is_file() else {}
    write_manifest(out_dir, phase="eval", config=config,
                   counts={"questions": len(rows), "trajectories": len(trajectories), "ranks": size},
                   extra={"per_rank": [f"rank_{r}" for r in range(size) if rows[r::size]]})
    return finalize(out_dir, rows, [summary(t) for t in trajectories])
