"""The batch runner: many episodes at bounded concurrency, one JSONL line per finished episode, resumable.

Output, under ``runs/eval/<name>/``::

    trajectories.jsonl   one trajectory per line, appended (one write per line) as each item finishes
    manifest.json        config without secrets, versions, counts, inputs
    metrics.json         means overall and by question type / level

An item whose policy keeps failing after its retries, or that exceeds the per-item timeout, is recorded
with ``error`` and ``finish: "error"``; the run goes on. ``resume=True`` keeps the finished lines, drops
errored and torn ones, and runs everything else, so every id ends up in the file exactly once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from agentrl.agent import error_trajectory, run_episode
from agentrl.io import DataError, JsonlAppender, iter_jsonl, write_json, write_jsonl
from agentrl.manifest import scrub, write_manifest
from agentrl.metrics import aggregate, tool_call_quality

TRAJECTORIES = "trajectories.jsonl"


@dataclass
class RunConfig:
    """Batch settings (the policy and task carry their own)."""

    concurrency: int = 32
    max_turns: int = 6
    item_timeout: float = 600.0
    progress: bool = True


def load_finished(path: Path) -> list[dict]:
    """Return the finished (error-free) trajectories already in ``path``, one per id (first wins).

    A torn final line (a write cut off by a crash) is skipped; any other malformed line is an error.
    """
    if not path.exists():
        return []
    seen: dict[str, dict] = {}
    for _, rec in iter_jsonl(path, allow_torn_tail=True):
        if rec.get("error") is None and "id" in rec and rec["id"] not in seen:
            seen[rec["id"]] = rec
    return list(seen.values())


def run_batch(policy, task, rows: list[dict], out_dir: str | Path, cfg: RunConfig | None = None, *,
              resume: bool = False, overwrite: bool = False, manifest_config: dict | None = None,
              inputs: dict | None = None) -> dict:
    """Run every row and write the run directory; return the metrics (also written to metrics.json)."""
    from agentrl.aio import run_sync

    return run_sync(arun_batch(policy, task, rows, out_dir, cfg, resume=resume, overwrite=overwrite,
                               manifest_config=manifest_config, inputs=inputs))


async def arun_batch(policy, task, rows: list[dict], out_dir: str | Path, cfg: RunConfig | None = None, *,
                     resume: bool = False, overwrite: bool = False, manifest_config: dict | None = None,
                     inputs: dict | None = None, annotate=None, extra_secrets: tuple[str, ...] = ()) -> dict:
    """Async body of :func:`run_batch`. ``annotate(traj)`` (async) may add to each trajectory before it is
    written, e.g. a judge verdict."""
    cfg = cfg or RunConfig()
    out_dir = Path(out_dir)
    path = out_dir / TRAJECTORIES
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"duplicate id '{dup}' in the question set")
    if path.exists() and not (resume or overwrite):
        raise DataError(f"{path} exists: pass --resume to continue it or --overwrite to start again")
    wanted = set(ids)
    done = [r for r in load_finished(path) if r["id"] in wanted] if resume else []
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, done)  # atomic rewrite: finished lines only, so retried ids are not duplicated
    done_ids = {r["id"] for r in done}
    todo = [r for r in rows if r["id"] not in done_ids]
    secrets = tuple(getattr(policy, "secrets", ())) + tuple(extra_secrets)
    config = {"policy": policy.describe(), "task": {"name": task.name, **task.config},
              "run": {"concurrency": cfg.concurrency, "max_turns": cfg.max_turns, "item_timeout": cfg.item_timeout},
              **(manifest_config or {})}
    counts = {"questions": len(rows), "resumed": len(done), "to_run": len(todo)}
    write_manifest(out_dir, phase="eval", config=config, counts=counts, inputs=inputs, secrets=secrets)

    progress = _Progress(len(rows), len(done), sum(r["metrics"].get("f1", 0.0) for r in done), cfg.progress)
    queue: asyncio.Queue = asyncio.Queue()
    for row in todo:
        queue.put_nowait(row)
    fatal: list[BaseException] = []
    with JsonlAppender(path) as out:
        async def worker() -> None:
            while not fatal:
                try:
                    row = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                started = time.time()
                try:
                    traj = await asyncio.wait_for(run_episode(policy, task, row, max_turns=cfg.max_turns),
                                                  cfg.item_timeout)
                except TimeoutError:
                    traj = error_trajectory(policy, task, row, f"timeout after {cfg.item_timeout:g}s", started)
                except Exception as exc:
                    from agentrl.policies.endpoint import FatalEndpointError

                    if isinstance(exc, FatalEndpointError):
                        fatal.append(exc)
                        return
                    traj = error_trajectory(policy, task, row, scrub(f"{type(exc).__name__}: {exc}", secrets), started)
                if annotate is not None and traj.get("error") is None:
                    await annotate(traj)
                out.write(traj)
                progress.update(traj)

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, min(cfg.concurrency, len(todo) or 1)))))
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()  # its connection pool belongs to this event loop
    progress.close()
    if fatal:
        raise DataError(f"the endpoint refused the run: {scrub(str(fatal[0]), secrets)}")
    return finalize(out_dir, rows)


def finalize(out_dir: Path, rows: list[dict]) -> dict:
    """Compute metrics.json over the trajectories of ``rows`` in ``out_dir``; return it."""
    records = [r for _, r in iter_jsonl(out_dir / TRAJECTORIES, allow_torn_tail=True)]
    metrics = aggregate(records)
    metrics["finish"] = _count(r.get("finish") for r in records)
    metrics["tools"] = tool_call_quality(records)
    metrics["missing"] = len({r["id"] for r in rows} - {r["id"] for r in records})
    write_json(out_dir / "metrics.json", metrics)
    return metrics


def _count(values) -> dict:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


class _Progress:
    """tqdm bar with the running mean F1 and error count; throughput comes from tqdm's rate."""

    def __init__(self, total: int, done: int, f1_sum: float, enabled: bool):
        from tqdm.auto import tqdm

        self.n, self.f1_sum, self.errors = done, f1_sum, 0
        self.bar = tqdm(total=total, initial=done, unit="q", desc="eval", disable=None if enabled else True,
                        dynamic_ncols=True)

    def update(self, traj: dict) -> None:
        self.n += 1
        self.f1_sum += float(traj["metrics"].get("f1", 0.0) or 0.0)
        self.errors += traj.get("error") is not None
        self.bar.set_postfix(f1=f"{self.f1_sum / self.n:.3f}", errors=self.errors, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
