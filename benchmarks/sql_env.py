"""SQL environment benchmark: the oracle on DB Bench dev, episodes/s and peak memory, against a bare baseline.

    uv run python benchmarks/sql_env.py            # ~10 s

Baseline (same run): the same episodes on a bare in-memory SQLite database (build the table, run the gold
statement, read the table) without the sandbox, limits, AgentBench table hash or scoring. The ratio is what the
sandbox and exact scoring cost per episode. Only the SQLite backend exists today (a MariaDB backend is open work).
"""

from __future__ import annotations

import contextlib
import json
import resource
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from agentrl.envs.sql import SQLEnv, build_database, load_dbbench, mysql_to_sqlite, oracle_plan, quote, sql_score  # noqa: E402


def oracle_episode(task: dict, scoring: str) -> float:
    """Run the oracle's plan in a fresh env and return its headline em."""
    env = SQLEnv(scoring=scoring)
    env.reset(**task)
    plan = oracle_plan(task)
    env.execute_sql(json.loads(plan[0].tool_calls[0]["arguments"])["query"])
    return sql_score(plan[1].content.split("<answer>")[1].split("</answer>")[0], task, env)["em"]


def bare_episode(task: dict) -> None:
    """The baseline: table, gold statement, table read, nothing else."""
    meta = task["metadata"]
    conn = build_database(meta["table"])
    with contextlib.suppress(sqlite3.Error):  # a gold SQLite cannot run costs its parse, as in the env
        conn.execute(mysql_to_sqlite(meta["sql"], meta["table"]["table_name"])).fetchall()
    conn.execute(f"SELECT * FROM {quote(meta['table']['table_name'])}").fetchall()
    conn.close()


def main() -> None:
    tasks = load_dbbench(ROOT / "data" / "samples" / "dbbench_dev.jsonl")
    rounds = 5
    start = time.perf_counter()
    for _ in range(rounds):
        for t in tasks:
            bare_episode(t)
    bare = rounds * len(tasks) / (time.perf_counter() - start)
    out = {"tasks": len(tasks), "bare_episodes_per_s": round(bare, 1)}
    for scoring in ("agentbench", "lenient"):
        start = time.perf_counter()
        scores = [oracle_episode(t, scoring) for _ in range(rounds) for t in tasks]
        eps = len(scores) / (time.perf_counter() - start)
        out[scoring] = {"oracle_em": round(sum(scores) / len(scores), 4), "episodes_per_s": round(eps, 1),
                        "vs_bare": round(eps / bare, 3)}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    for scoring in ("agentbench", "lenient"):
        v = out[scoring]
        print(f"sqlite, {scoring} scoring: oracle em {v['oracle_em']:.4f} on {len(tasks)} DB Bench dev tasks, "
              f"{v['episodes_per_s']:.0f} episodes/s ({v['vs_bare']:.2f}x of a bare SQLite episode, "
              f"{out['bare_episodes_per_s']:.0f}/s)")
    print(f"peak RSS {out['peak_rss_mb']:.0f} MB")
    path = ROOT / "runs" / "bench" / "sql_env.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
