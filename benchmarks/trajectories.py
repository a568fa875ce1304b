"""Trajectory statistics benchmark: 100k synthetic trajectories, polars path vs a plain-Python json loop.

    uv run python benchmarks/trajectories.py             # 100,000 trajectories (~3 KB each, like real ones)
    uv run python benchmarks/trajectories.py --n 20000

Both sides compute the same headline statistics from the same file (success counts, metric means, turns /
tool calls / tokens by outcome, distributions, finish reasons, by type); the Python side is the seed-style
``for line in f: json.loads(line)`` loop. Peak memory is measured in a child process per side.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path


def synthetic(path: Path, n: int, seed: int = 0) -> int:
    """Write ``n`` realistic trajectories (2-8 turns, passages in tool messages); return bytes written."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(2000)]
    with path.open("w") as fh:
        for i in range(n):
            calls = rng.choice([0, 1, 1, 2, 2, 2, 3, 4, 6])
            msgs = [{"role": "system", "content": "You answer questions by searching. " * 8},
                    {"role": "user", "content": " ".join(rng.choices(words, k=14)) + "?"}]
            per_turn = []
            for c in range(calls):
                fn = {"name": "search", "arguments": json.dumps({"query": " ".join(rng.choices(words, k=4))})}
                msgs.append({"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"c{c}", "type": "function", "function": fn}]})
                msgs.append({"role": "tool", "tool_call_id": f"c{c}", "name": "search",
                             "content": " ".join(rng.choices(words, k=60))})
                per_turn.append({"prompt_tokens": 300 + 150 * c, "completion_tokens": 30, "latency_s": 0.5})
            final = {"role": "assistant", "content": "<answer>x</answer>"}
            if rng.random() < 0.3:
                final["reasoning"] = "thinking " * rng.randint(5, 50)
            msgs.append(final)
            per_turn.append({"prompt_tokens": 300 + 150 * calls, "completion_tokens": 20, "latency_s": 0.4})
            f1 = rng.random()
            reasoning = len(final.get("reasoning", ""))
            usage = None if rng.random() < 0.01 else {
                "turns": calls + 1, "tool_calls": calls, "tool_errors": int(rng.random() < 0.05),
                "prompt_tokens": sum(t["prompt_tokens"] for t in per_turn),
                "completion_tokens": sum(t["completion_tokens"] for t in per_turn),
                "total_tokens": sum(t["prompt_tokens"] + t["completion_tokens"] for t in per_turn),
                "reasoning_chars": reasoning,
                "last_turn": {"prompt_tokens": per_turn[-1]["prompt_tokens"], "completion_tokens": 20},
                "per_turn": per_turn}
            rec = {"id": f"t{i}", "env": "search", "model": "m", "policy": "endpoint", "question": msgs[1]["content"],
                   "golden_answers": ["x"], "messages": msgs, "tools": [], "prediction": "x",
                   "metrics": {"em": float(f1 > 0.9), "f1": f1, "precision": f1, "recall": f1, "acc": float(f1 > 0.5)},
                   "usage": usage, "finish": rng.choice(["answer"] * 8 + ["max_turns", "no_answer"]), "error": None,
                   "timing": {"seconds": 1.0}, "metadata": {"type": rng.choice(["bridge", "comparison"])}}
            fh.write(json.dumps(rec) + "\n")
    return path.stat().st_size


def polars_stats(path: str) -> dict:
    from agentrl.data.stats import compute_stats
    from agentrl.data.trajectories import trajectory_frame

    return compute_stats(trajectory_frame([path]))


def python_stats(path: str) -> dict:
    """The baseline: one json.loads per line, statistics in plain Python."""
    rows = []
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            u = r.get("usage") or {}
            m = r.get("metrics") or {}
            rows.append((m.get("f1") or 0.0, m.get("em") or 0.0, u.get("turns"), u.get("tool_calls"),
                         u.get("total_tokens"), r.get("finish"), (r.get("metadata") or {}).get("type"),
                         sum(len(x.get("reasoning") or "") for x in r["messages"])))
    out: dict = {"total": len(rows), "success_f1": sum(1 for x in rows if x[0] >= 0.8),
                 "success_em": sum(1 for x in rows if x[1] >= 1.0)}
    for name, idx in (("turns", 2), ("tool_calls", 3), ("total_tokens", 4)):
        for outcome, sel in (("all", rows), ("success", [x for x in rows if x[0] >= 0.8]),
                             ("failure", [x for x in rows if x[0] < 0.8])):
            vals = [x[idx] for x in sel if x[idx] is not None]
            out[f"{name}_{outcome}"] = (statistics.fmean(vals), statistics.stdev(vals)) if len(vals) > 1 else None
        dist: dict = {}
        for x in rows:
            dist[x[idx]] = dist.get(x[idx], 0) + 1
        out[f"{name}_dist"] = dist
    out["finish"] = {f: sum(1 for x in rows if x[5] == f) for f in {x[5] for x in rows}}
    out["f1_mean"] = statistics.fmean(x[0] for x in rows)
    out["by_type"] = {t: statistics.fmean(x[0] for x in rows if x[6] == t) for t in {x[6] for x in rows}}
    return out


def _child(fn_name: str, path: str, conn) -> None:
    fn = {"polars": polars_stats, "python": python_stats}[fn_name]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    result = fn(path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send({"seconds": time.perf_counter() - t, "peak_rss_mb": peak / 1024, "rss_increase_mb": (peak - base) / 1024,
               "total": result["total"], "success_f1": result["success_f1"]})


def measure(fn_name: str, path: str) -> dict:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_child, args=(fn_name, path, child))
    proc.start()
    out = parent.recv()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trajectories.jsonl"
        size = synthetic(path, args.n)
        print(f"{args.n:,} synthetic trajectories, {size / 1e6:.0f} MB")
        fast = measure("polars", str(path))
        slow = measure("python", str(path))
    assert fast["total"] == slow["total"] == args.n and fast["success_f1"] == slow["success_f1"]
    print(f"polars statistics: {fast['seconds']:.2f} s, peak RSS {fast['peak_rss_mb']:.0f} MB "
          f"(+{fast['rss_increase_mb']:.0f} MB for the work)")
    print(f"python json loop:  {slow['seconds']:.2f} s, peak RSS {slow['peak_rss_mb']:.0f} MB "
          f"(+{slow['rss_increase_mb']:.0f} MB)")
    print(f"speed-up x{slow['seconds'] / fast['seconds']:.1f}; same totals and success counts on both sides")


if __name__ == "__main__":
    main()
