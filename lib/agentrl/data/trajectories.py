"""Loading trajectories (phase 01's format, docs/formats.md) from one or several runs.

Two paths produce the same flat polars frame (one row per trajectory, no message text):

- fast: polars reads the JSONL files natively with an explicit schema (only the fields statistics need);
- careful: a streamed Python pass that names the file and line of any problem.

The fast path is tried first and never parses message text: turns, tool calls and reasoning length come
from ``usage``; only rows without them (``usage: null``, older writers) are completed from their messages
by a Python pass over those rows. Any problem the fast path meets (a malformed or torn line, a missing
required field) sends the file through the careful path, which skips a torn final line with a warning and
raises ``DataError("file:line: ...")`` for anything else. ``usage: null`` or missing usage is allowed and
counted.
"""

from __future__ import annotations

import json
import mmap
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentrl.core.io import DataError, iter_jsonl

REQUIRED = ("id", "question", "messages", "metrics")
METRICS = ("em", "f1", "precision", "recall", "acc", "judge", "grounded")
TOKENS = ("prompt_tokens", "completion_tokens", "total_tokens")


def trajectory_files(sources: Iterable[str | Path]) -> list[Path]:
    """Return the trajectory files named by ``sources`` (run directories or .jsonl files), in order."""
    files = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            main = p / "trajectories.jsonl"
            candidates = [main] if main.exists() else sorted(p.glob("*.jsonl"))
            if not candidates:
                raise DataError(f"{p}: no trajectories.jsonl in this directory")
            files += candidates
        elif p.is_file():
            files.append(p)
        else:
            raise DataError(f"{p}: not found")
    if not files:
        raise DataError("no trajectory files given")
    return files


def iter_trajectories(sources: Iterable[str | Path]) -> Iterator[tuple[Path, int, dict]]:
    """Yield ``(file, row, record)`` for every trajectory, streamed; ``row`` counts non-blank lines from 0.

    Missing required fields raise DataError naming file, line and field; a torn final line is skipped.
    """
    for path in trajectory_files(sources):
        for row, (lineno, rec) in enumerate(iter_jsonl(path, allow_torn_tail=True)):
            for field in REQUIRED:
                if field not in rec or rec[field] is None:
                    raise DataError(f"{path}:{lineno}: missing field '{field}'")
            if not isinstance(rec["messages"], list):
                raise DataError(f"{path}:{lineno}: field 'messages' must be a list")
            yield path, row, rec


def flatten(rec: dict, source: str = "", row: int = 0) -> dict:
    """Return the flat statistics row of one trajectory (no message text)."""
    m = rec.get("metrics") or {}
    u = rec.get("usage")
    meta = rec.get("metadata") or {}
    usage = u if isinstance(u, dict) else {}
    last = usage.get("last_turn") or {}
    out = {
        "source": source, "row": row, "id": str(rec["id"]), "env": rec.get("env") or "unknown",
        "model": rec.get("model"), "policy": rec.get("policy"), "question": rec.get("question"),
        "prediction": rec.get("prediction"), "finish": rec.get("finish") or "unknown",
        "error": rec.get("error"), "type": _str(meta.get("type")), "level": _str(meta.get("level")),
        "usage_missing": not isinstance(u, dict),
        "turns": usage.get("turns"), "tool_calls": usage.get("tool_calls"), "tool_errors": usage.get("tool_errors"),
        "last_prompt_tokens": last.get("prompt_tokens"), "last_completion_tokens": last.get("completion_tokens"),
        "reasoning_chars": usage.get("reasoning_chars"),
    }
    for k in METRICS:
        v = m.get(k)
        out[k] = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    for k in TOKENS:
        out[k] = usage.get(k)
    if out["turns"] is None:  # derive what the messages still tell
        out["turns"] = sum(1 for x in rec["messages"] if isinstance(x, dict) and x.get("role") == "assistant")
    if out["tool_calls"] is None:
        out["tool_calls"] = sum(len(x.get("tool_calls") or []) for x in rec["messages"] if isinstance(x, dict))
    if out["reasoning_chars"] is None:
        out["reasoning_chars"] = sum(len(x.get("reasoning") or "") for x in rec["messages"] if isinstance(x, dict))
    return out


def _str(v) -> str | None:
    return None if v is None or isinstance(v, dict | list) else str(v)


def _schema():
    import polars as pl

    return {
        "id": pl.String, "env": pl.String, "model": pl.String, "policy": pl.String, "question": pl.String,
        "prediction": pl.String, "finish": pl.String, "error": pl.String,
        "metrics": pl.Struct({k: pl.Float64 for k in METRICS}),
        "usage": pl.Struct({"turns": pl.Int64, "tool_calls": pl.Int64, "tool_errors": pl.Int64,
                            "reasoning_chars": pl.Int64, **{k: pl.Int64 for k in TOKENS},
                            "last_turn": pl.Struct({"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64})}),
        "metadata": pl.Struct({"type": pl.String, "level": pl.String}),
        # no messages: they are most of the bytes and would triple the parse time; any stage that needs them
        # (curation writing full trajectories) validates them on the careful path
    }


def _fast_frame(path: Path):
    import polars as pl

    raw = pl.read_ndjson(path, schema=_schema())
    if raw.height and (raw["id"].null_count() or raw["question"].null_count() or raw["metrics"].null_count()):
        raise ValueError("missing required fields")
    if _count_in_file(path, rb'"messages"\s*:\s*\[') < raw.height:
        # messages are not parsed here; a record without them (or with a non-list) goes the careful way,
        # which names file and line, so analyze refuses what curate would refuse
        raise ValueError("messages not found in every record")
    usage = pl.col("usage")
    frame = raw.select(
        pl.lit(str(path)).alias("source"), pl.int_range(pl.len()).cast(pl.Int64).alias("row"), "id",
        pl.col("env").fill_null("unknown"), "model", "policy", "question", "prediction",
        pl.col("finish").fill_null("unknown"), "error",
        pl.col("metadata").struct.field("type").alias("type"), pl.col("metadata").struct.field("level").alias("level"),
        usage.is_null().alias("usage_missing"),
        *[usage.struct.field(k).alias(k) for k in ("turns", "tool_calls", "tool_errors", "reasoning_chars")],
        usage.struct.field("last_turn").struct.field("prompt_tokens").alias("last_prompt_tokens"),
        usage.struct.field("last_turn").struct.field("completion_tokens").alias("last_completion_tokens"),
        *[pl.col("metrics").struct.field(k).alias(k) for k in METRICS],
        *[usage.struct.field(k).alias(k) for k in TOKENS],
    )
    gaps = frame.filter(pl.any_horizontal(pl.col(c).is_null() for c in ("turns", "tool_calls", "reasoning_chars")))
    if gaps.height > frame.height // 5:  # mostly an older writer: one careful pass is cheaper than patching
        return _careful_frame(path)
    if gaps.height:  # complete these rows from their messages, reading only their lines

        lines = _lines(path, set(gaps["row"].to_list()))
        patch = [flatten(json.loads(line), str(path), row) for row, line in lines.items()]
        cols = ["row", "turns", "tool_calls", "reasoning_chars"]
        fix = pl.DataFrame([{c: p[c] for c in cols} for p in patch], schema={c: pl.Int64 for c in cols})
        frame = frame.update(fix, on="row")
    return frame


def _count_in_file(path: Path, pattern: bytes) -> int:
    """Return how many times the regular expression ``pattern`` matches in the file (through a memory map)."""
    if path.stat().st_size == 0:
        return 0
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return sum(1 for _ in re.finditer(pattern, mm))


def _lines(path: Path, rows: set[int]) -> dict[int, bytes]:
    """Return the bytes of the given non-blank line numbers (0-based), found by a vectorised newline scan."""
    import numpy as np

    chunk = 1 << 24  # scan 16 MB at a time: memory stays flat whatever the file size
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        nl = np.concatenate([np.flatnonzero(view[i:i + chunk] == 10) + i for i in range(0, len(view), chunk)]
                            or [np.zeros(0, dtype=np.int64)])
        del view
        starts = np.concatenate(([0], nl + 1))
        ends = np.concatenate((nl, [len(mm)]))
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
        return {r: bytes(mm[int(starts[r]):int(ends[r])]) for r in sorted(rows)}


def _careful_frame(path: Path):
    import polars as pl

    rows = [flatten(rec, str(path), row) for _, row, rec in iter_trajectories([path])]
    return pl.DataFrame(rows, schema=frame_schema())


def frame_schema() -> dict:
    """Return the schema of the flat trajectory frame."""
    import polars as pl

    s = {"source": pl.String, "row": pl.Int64, "id": pl.String, "env": pl.String, "model": pl.String,
         "policy": pl.String, "question": pl.String, "prediction": pl.String, "finish": pl.String,
         "error": pl.String, "type": pl.String, "level": pl.String, "usage_missing": pl.Boolean,
         "turns": pl.Int64, "tool_calls": pl.Int64, "tool_errors": pl.Int64, "last_prompt_tokens": pl.Int64,
         "last_completion_tokens": pl.Int64, "reasoning_chars": pl.Int64}
    s.update({k: pl.Float64 for k in METRICS})
    s.update({k: pl.Int64 for k in TOKENS})
    return s


def trajectory_frame(sources: Iterable[str | Path]):
    """Return the flat polars frame of all trajectories in ``sources`` (see module docstring).

    Raises DataError for an empty input, a malformed line (file:line) or a missing required field.
    """
    import polars as pl

    frames = []
    for path in trajectory_files(sources):
        if path.stat().st_size == 0:
            raise DataError(f"{path}: empty file")
        try:
            frame = _fast_frame(path)
        except Exception:  # the careful path says exactly what is wrong, or reads a torn tail the fast one cannot
            frame = _careful_frame(path)
        frames.append(frame.select(list(frame_schema())).cast(frame_schema()))
    df = pl.concat(frames, how="vertical")
    if df.height == 0:
        raise DataError(f"no trajectories in {', '.join(str(p) for p in trajectory_files(sources))}")
    envs = df["env"].unique().to_list()
    if len(envs) > 1:
        warnings.warn(f"trajectories from several environments ({', '.join(sorted(envs))}): statistics are "
                      "also broken down by env", stacklevel=2)
    return df


def read_trajectory(source: str | Path, row: int) -> dict:
    """Return the full trajectory at non-blank line ``row`` (0-based) of ``source``."""
    lines = _lines(Path(source), {row})
    if row not in lines:
        raise DataError(f"{source}: no row {row}")
    return json.loads(lines[row])

def reasoning_chars(messages: list[dict]) -> int:
    """Return the total length of the reasoning text of the assistant messages."""
    return sum(len(m.get("reasoning") or "") for m in messages if isinstance(m, dict))

def usage_summary(per_turn: list[dict], tool_calls: int, tool_errors: dict[str, int], reasoning: int = 0) -> dict:
    """Return the trajectory ``usage`` block: turn/tool counts, token totals, reasoning length, the last turn
    and every turn."""
    def total(key: str) -> int | None:
        values = [t[key] for t in per_turn if t.get(key) is not None]
        return sum(values) if values else None

    prompt, completion = total("prompt_tokens"), total("completion_tokens")
    last = per_turn[-1] if per_turn else {}
    return {
        "turns": len(per_turn),
        "tool_calls": tool_calls,
        "tool_errors": sum(tool_errors.values()),
        "tool_error_kinds": tool_errors,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": None if prompt is None and completion is None else (prompt or 0) + (completion or 0),
        "reasoning_chars": reasoning,
        "last_turn": {"prompt_tokens": last.get("prompt_tokens"), "completion_tokens": last.get("completion_tokens")},
        "per_turn": per_turn,
    }
