"""The batch runner: many episodes at bounded concurrency, one JSONL line per finished episode, resumable.

Output, under ``runs/eval/<name>/``::

    trajectories.jsonl   one trajectory per line, appended (one write per line) as each item finishes
    manifest.json        config without secrets, versions, counts, inputs
    metrics.json         means overall and by question type / level

An item whose policy keeps failing after its retries, or that exceeds the per-item timeout, is recorded
with ``error`` and ``finish: "error"``; the run goes on. ``resume=True`` keeps the finished lines, drops
errored and torn ones, and runs everything else, so every id ends up in the file exactly once. It refuses
to resume a directory whose manifest fingerprint (model, sampling, task settings: see :func:`run_fingerprint`)
differs from this run's, so one file never mixes two configurations.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.aio import frozen_heap, run_sync
from agentrl.core.io import DataError, JsonlAppender, iter_jsonl, read_json, write_json, write_jsonl
from agentrl.core.manifest import scrub, write_manifest
from agentrl.core.metrics import aggregate, tool_call_quality
from agentrl.core.validate import AtLeast1, Moved, Positive
from agentrl.envs.base import EnvironmentDown
from agentrl.rollout.agent import error_trajectory, run_episode
from agentrl.rollout.endpoint import FatalEndpointError, MalformedReplyError

TRAJECTORIES = "trajectories.jsonl"
# Policy settings that change how a run is carried out, not what it produces: left out of the fingerprint so a
# resume may change them (a Colab tunnel URL changes every session; retries and timeouts get tuned mid-run).
_NOT_IN_FINGERPRINT = {"base_url", "max_retries", "request_timeout", "backoff_base", "backoff_max", "timeout",
                       "concurrency", "api_key", "transport"}


@dataclass
class RunConfig:
    """Batch settings (the policy and task carry their own)."""

    concurrency: AtLeast1 = 32
    # tokens after the prompt an episode may use (model tokens + tool results, as GRPO's max_completion_length):
    # beyond it the episode ends with finish "length" (agentrl.rollout.agent); None: no budget
    completion_budget: AtLeast1 | None = None
    item_timeout: Positive = 600.0
    progress: bool = True
    moved: dict = field(default_factory=dict, metadata={"extra": Moved({
        "max_turns": "the environment's table: [<run>.<env>] max_turns (the turn budget is the environment's)"})})


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


def run_fingerprint(policy, task, cfg: RunConfig, secrets: tuple[str, ...] = ()) -> dict:
    """Return what defines a run's results: the policy's settings (without secrets, endpoint address, timeouts,
    retries or concurrency), the task name and config, and its turn budget, as stored in manifest.json."""
    pol = {k: v for k, v in policy.describe().items() if k not in _NOT_IN_FINGERPRINT}
    fp = {"policy": pol, "task": {"name": task.name, **task.config}, "max_turns": task.max_turns}
    if cfg.completion_budget is not None:  # only a set budget enters the fingerprint: older runs still resume
        fp["completion_budget"] = cfg.completion_budget
    # through JSON, so it compares equal to the copy read back from a manifest (tuples become lists, ...)
    return json.loads(json.dumps(scrub(fp, secrets), default=str))


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict) and obj:
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def check_resumable(out_dir: Path, fingerprint: dict) -> None:
    """Raise DataError naming the differing settings when ``out_dir``'s manifest was written by a run with
    another fingerprint; return None when they agree or when there is no fingerprint to compare (an older or
    interrupted run directory resumes as before)."""
    manifest = out_dir / "manifest.json"
    if not manifest.exists():
        return
    old = read_json(manifest).get("fingerprint")
    if old is None:
        return
    before, after = _flatten(old), _flatten(fingerprint)
    missing = object()
    diff = sorted(k for k in before.keys() | after.keys() if before.get(k, missing) != after.get(k, missing))
    if not diff:
        return

    def show(values: dict) -> str:
        return ", ".join(f"{k} {json.dumps(values[k]) if k in values else '(not set)'}" for k in diff)

    raise DataError(f"{out_dir} was run with {show(before)}, this run uses {show(after)}: "
                    "use another --name or --overwrite")


def run_batch(policy, task, rows: list[dict], out_dir: str | Path, cfg: RunConfig | None = None, *,
              resume: bool = False, overwrite: bool = False, manifest_config: dict | None = None,
              inputs: dict | None = None) -> dict:
    """Run every row and write the run directory; return the metrics (also written to metrics.json)."""
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
    secrets = tuple(getattr(policy, "secrets", ())) + tuple(extra_secrets)
    fingerprint = run_fingerprint(policy, task, cfg, secrets)
    wanted = set(ids)
    out_dir.mkdir(parents=True, exist_ok=True)
    # the lock first: a run held by another process is reported as such, whatever the directory holds
    with RunLock(out_dir), frozen_heap():
        if path.exists() and not (resume or overwrite):
            raise DataError(f"{path} exists: pass --resume to continue it or --overwrite to start again")
        if resume and not overwrite:
            check_resumable(out_dir, fingerprint)  # before anything in the directory is touched
        done = [r for r in load_finished(path) if r["id"] in wanted] if resume else []
        write_jsonl(path, done)  # atomic rewrite: finished lines only, so retried ids are not duplicated
        return await _run_locked(policy, task, rows, out_dir, path, cfg, done, secrets, fingerprint,
                                 manifest_config, inputs, annotate)


async def _run_locked(policy, task, rows, out_dir, path, cfg, done, secrets, fingerprint, manifest_config,
                      inputs, annotate) -> dict:
    done_ids = {r["id"] for r in done}
    todo = [r for r in rows if r["id"] not in done_ids]
    config = {"policy": policy.describe(), "task": {"name": task.name, **task.config},
              "run": {"concurrency": cfg.concurrency, "max_turns": task.max_turns, "item_timeout": cfg.item_timeout},
              **(manifest_config or {})}
    counts = {"questions": len(rows), "resumed": len(done), "to_run": len(todo)}
    write_manifest(out_dir, phase="eval", config=config, counts=counts, inputs=inputs, secrets=secrets,
                   extra={"fingerprint": fingerprint})

    progress = _Progress(len(rows), len(done), sum(r["metrics"].get("f1", 0.0) for r in done), cfg.progress)
    written = [summary(r) for r in done]  # what metrics.json needs of every line in the file, kept as written
    queue: asyncio.Queue = asyncio.Queue()
    for row in todo:
        queue.put_nowait(row)
    fatal: list[BaseException] = []
    unwritable: list[str] = []  # why the trajectories file stopped taking records: the run stops
    with JsonlAppender(path) as out:
        async def worker() -> None:
            while not (fatal or unwritable):
                try:
                    row = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                started = time.time()
                try:
                    # asyncio.timeout, not wait_for: wait_for wraps every episode in one more task
                    async with asyncio.timeout(cfg.item_timeout):
                        traj = await run_episode(policy, task, row, max_turns=task.max_turns,
                                                 budget=cfg.completion_budget)
                    if annotate is not None:
                        await annotate(traj)
                except (FatalEndpointError, EnvironmentDown) as exc:  # a wrong key or model, a dead server: stop
                    fatal.append(exc)
                    return
                except Exception as exc:
                    kind, message = error_kind(exc, cfg.item_timeout)
                    traj = error_trajectory(policy, task, row, scrub(message, secrets), started, kind=kind)
                failure = _write(out, traj, secrets)
                if isinstance(failure, Exception) and not isinstance(failure, OSError):
                    # the record itself could not be encoded: the item is recorded as an error, retried on resume
                    traj = error_trajectory(policy, task, row, scrub(f"the record could not be written: "
                                            f"{type(failure).__name__}: {str(failure)[:300]}", secrets), started,
                                            kind="write_error")
                    failure = _write(out, traj, secrets)
                if failure is not None:  # the file takes no record (disk full, ...): stop with what is written
                    unwritable.append(scrub(f"{type(failure).__name__}: {str(failure)[:300]}", secrets))
                    return
                written.append(scrub_values(summary(traj), secrets))  # as the line was written
                progress.update(traj)

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, min(cfg.concurrency, len(todo) or 1)))))
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()  # its connection pool belongs to this event loop
    progress.close()
    if fatal and isinstance(fatal[0], EnvironmentDown):
        raise DataError(f"the environment stopped the run: {scrub(str(fatal[0]), secrets)}")
    if fatal:
        raise DataError(f"the endpoint refused the run: {scrub(str(fatal[0]), secrets)}")
    if unwritable:
        raise DataError(f"{path}: a record could not be written ({unwritable[0]}); the run stopped. The "
                        f"{progress.n} records already in the file are intact: fix the cause (free disk space, "
                        "...) and rerun with --resume")
    return finalize(out_dir, rows, written)


def _write(out: JsonlAppender, traj: dict, secrets: tuple[str, ...]) -> Exception | None:
    """Append the scrubbed ``traj``; return the exception that prevented it (None when written)."""
    try:
        out.write(scrub_values(traj, secrets))
    except Exception as exc:  # noqa: BLE001 - the caller decides: an error record, or the run stops
        return exc
    return None


class RunLock:
    """An exclusive lock on a run directory (``.lock``, flock): a second writer of the same run stops at once.

    Without it a second ``eval`` on the same name rewrites trajectories.jsonl at start-up and the first one's
    later appends land in an unlinked file. The lock file holds the holder's pid for the message; the kernel
    releases the lock when the holder exits, even on SIGKILL.
    """

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / ".lock"
        self._fd = -1

    def __enter__(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataError(f"{self.path.parent} is being written by another process (pid {holder}): wait for it "
                            "to finish or use another --name") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def error_kind(exc: BaseException, item_timeout: float) -> tuple[str, str]:
    """Return ``(kind, message)`` for an item that failed with ``exc``: timeout, endpoint_unavailable (still
    failing after the retries), endpoint_rejected (4xx), malformed_reply, tool_crash or internal."""
    if isinstance(exc, TimeoutError):
        return "timeout", f"timeout after {item_timeout:g}s"
    text = f"{type(exc).__name__}: {str(exc)[:500]}"
    if isinstance(exc, MalformedReplyError):
        return "malformed_reply", text
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a dependency
        openai = None
    if openai is not None:
        if isinstance(exc, openai.RateLimitError | openai.InternalServerError | openai.APITimeoutError
                      | openai.APIConnectionError):
            return "endpoint_unavailable", f"{text} (after the retries)"
        if isinstance(exc, openai.APIStatusError):
            return "endpoint_rejected", text
    return "internal", text


def scrub_values(obj, secrets: tuple[str, ...]):
    """Return ``obj`` with every occurrence of a secret string replaced by ``***`` in any string, at any depth
    (keys included); ``obj`` itself when there is no secret to remove."""
    secrets = tuple(x for x in secrets if x and len(x) >= 4)
    if not secrets:
        return obj

    def walk(o):
        if isinstance(o, str):
            for x in secrets:
                if x in o:
                    o = o.replace(x, "***")
            return o
        if isinstance(o, dict):
            return {walk(k): walk(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [walk(v) for v in o]
        return o

    return walk(obj)


def summary(traj: dict) -> dict:
    """Return the parts of a trajectory that :func:`finalize` reads: id, metrics, metadata, finish, error, error
    kind, judge verdict, and each tool message's role and error (the message texts left out)."""
    out = {k: traj[k] for k in ("id", "metrics", "metadata", "finish", "error", "error_kind", "judge") if k in traj}
    out["messages"] = [{"role": "tool", "error": m.get("error")} for m in traj.get("messages") or []
                       if isinstance(m, dict) and m.get("role") == "tool"]
    return out


def finalize(out_dir: Path, rows: list[dict], records: list[dict] | None = None) -> dict:
    """Compute metrics.json over the trajectories of ``rows`` in ``out_dir``; return it.

    ``records`` are the lines of the trajectories file when the caller has them (the runner keeps the
    :func:`summary` of every line it kept or wrote, sparing a re-read of the whole file: a twentieth of the
    harness's CPU per question); without them the file is read.
    When trajectories carry judge verdicts, ``judge_status`` counts them by status (ok, cached, fallback,
    no_prediction) and a warning says how many fell back, since those scores are not the judge's.
    """
    if records is None:
        records = [r for _, r in iter_jsonl(out_dir / TRAJECTORIES, allow_torn_tail=True)]
    metrics = aggregate(records)
    metrics["finish"] = _count(r.get("finish") for r in records)
    metrics["tools"] = tool_call_quality(records)
    metrics["missing"] = len({r["id"] for r in rows} - {r["id"] for r in records})
    metrics["error_kinds"] = _count(r.get("error_kind") or "other" for r in records if r.get("error"))
    reasons = [(r.get("metadata") or {}).get("unscorable_reason") for r in records]
    if any(reasons):  # items the env could not score (a SQL task whose gold statement fails), by reason
        metrics["unscorable_reasons"] = _count(x for x in reasons if x)
    judged = [r["judge"].get("status") for r in records if isinstance(r.get("judge"), dict)]
    if judged:
        metrics["judge_status"] = {"ok": 0, "fallback": 0, **_count(judged)}
        if metrics["judge_status"]["fallback"]:
            warnings.warn(f"{metrics['judge_status']['fallback']} of {len(judged)} judge verdicts are fallbacks "
                          "(empty, unparseable or failed judge replies), not the judge's: see judge.status in "
                          f"{out_dir / TRAJECTORIES}", stacklevel=2)
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
