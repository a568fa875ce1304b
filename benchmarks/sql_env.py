"""SQL environment benchmark: the oracle on DB Bench dev, episodes/s and peak memory per backend, against a bare
baseline on the same backend.

    uv run python benchmarks/sql_env.py                    # both backends (~1 min), each in its own process
    uv run python benchmarks/sql_env.py --backend sqlite   # or mariadb
    uv run python benchmarks/sql_env.py --gold data/samples/dbbench_dev.jsonl --gold PATH/standard.jsonl

``--gold`` measures instead how many INSERT/UPDATE/DELETE tasks of a DB Bench file have a gold statement that
reproduces the task's ``answer_md5`` through AgentBench's table hash on each backend (the statement run through
``execute_sql`` as the model's would be), and lists the others with the statement's reply.

An episode is what the agent loop does: build the env's database, the oracle's plan (a probe of the gold query for
SELECT tasks), one ``execute_sql``, the scores, the clean-up. A first round over the 60 dev tasks is reported apart:
the MariaDB backend caches the gold's effect per task (the probe and the expected table), so later episodes of a
task cost less, as repeated GRPO episodes do; then five rounds per scoring.

Baselines (same run, same backend): SQLite, the same episodes on a bare in-memory database (build the table, run the
gold statement, read the table) without the sandbox, limits, AgentBench table hash or scoring; MariaDB, the admin
creating a database with the table, running the gold statement, reading the table and dropping the database, without
the episode user, statement checks or scoring. Peak RSS is this process's (ru_maxrss) plus, for MariaDB, the
server's (VmHWM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from agentrl.envs.sql.dbbench import load_dbbench  # noqa: E402
from agentrl.envs.sql.env import SQLEnv, sql_score  # noqa: E402
from agentrl.envs.sql.lex import mysql_to_sqlite  # noqa: E402
from agentrl.envs.sql.oracle import oracle_plan  # noqa: E402
from agentrl.envs.sql.sandbox import build_database, quote  # noqa: E402

ROUNDS = 5


def oracle_episode(task: dict, scoring: str, backend: str) -> float | None:
    """Run the oracle's plan in a fresh env and return its headline em (None when the backend refuses the task)."""
    from agentrl.core.io import DataError

    if backend == "mariadb":
        from agentrl.envs.sql import mariadb

        env, plan_fn = mariadb.MariaDBEnv(scoring=scoring), mariadb.oracle_plan
    else:
        env, plan_fn = SQLEnv(scoring=scoring), oracle_plan
    try:
        env.reset(**task)
        plan = plan_fn(task)
    except DataError:
        return None  # MariaDB: db_5's table has a column without a name, which MySQL refuses
    try:
        env.execute_sql(json.loads(plan[0].tool_calls[0]["arguments"])["query"])
        return sql_score(plan[1].content.split("<answer>")[1].split("</answer>")[0], task, env)["em"]
    finally:
        env._close()


def bare_sqlite_episode(task: dict) -> None:
    """The SQLite baseline: table, gold statement, table read, nothing else."""
    meta = task["metadata"]
    conn = build_database(meta["table"])
    with contextlib.suppress(sqlite3.Error):  # a gold SQLite cannot run costs its parse, as in the env
        conn.execute(mysql_to_sqlite(meta["sql"], meta["table"]["table_name"])).fetchall()
    conn.execute(f"SELECT * FROM {quote(meta['table']['table_name'])}").fetchall()
    conn.close()


def bare_mariadb_episode(task: dict, n: int) -> None:
    """The MariaDB baseline: the admin creates a database with the table, runs the gold, reads the table, drops it."""
    from agentrl.envs.sql import mariadb_server

    server = mariadb_server.shared_server()
    meta = task["metadata"]
    database = f"bare_{n}"
    try:
        server._create(database, meta["table"])
    except Exception:  # noqa: BLE001 - db_5: refused as in the env
        return
    with contextlib.suppress(Exception):
        server.admin([meta["sql"]], database=database)
    server.admin([f"SELECT * FROM {mariadb_server.backtick(meta['table']['table_name'])}",
                  f"DROP DATABASE {database}"], database=database)


def measure(backend: str) -> dict:
    """Return the figures of one backend (bare baseline, oracle per scoring, peak RSS)."""
    tasks = load_dbbench(ROOT / "data" / "samples" / "dbbench_dev.jsonl")
    out: dict = {"backend": backend, "tasks": len(tasks)}
    if backend == "mariadb":
        from agentrl.envs.sql import mariadb_server

        start = time.perf_counter()
        server = mariadb_server.shared_server()
        out["server_start_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    for r in range(ROUNDS):
        for i, t in enumerate(tasks):
            bare_mariadb_episode(t, r * len(tasks) + i) if backend == "mariadb" else bare_sqlite_episode(t)
    bare = ROUNDS * len(tasks) / (time.perf_counter() - start)
    out["bare_episodes_per_s"] = round(bare, 1)
    start = time.perf_counter()
    first = [oracle_episode(t, "agentbench", backend) for t in tasks]  # cold: nothing cached yet
    out["first_round_episodes_per_s"] = round(len(first) / (time.perf_counter() - start), 1)
    for scoring in ("agentbench", "lenient"):
        start = time.perf_counter()
        scores = [oracle_episode(t, scoring, backend) for _ in range(ROUNDS) for t in tasks]
        eps = len(scores) / (time.perf_counter() - start)
        scored = [s for s in scores if s is not None]
        out[scoring] = {"oracle_em": round(sum(scored) / len(scored), 4), "episodes_per_s": round(eps, 1),
                        "vs_bare": round(eps / bare, 3),
                        "refused": sorted({t["id"] for t, s in zip(tasks * ROUNDS, scores, strict=True) if s is None})}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if backend == "mariadb":
        out["server_peak_rss_mb"] = round(server.peak_rss_bytes() / 2**20, 1)
        out["leftover_databases"] = server.databases()
    return out


def report(out: dict) -> None:
    """Print one backend's figures."""
    backend = out["backend"]
    for scoring in ("agentbench", "lenient"):
        v = out[scoring]
        refused = f" ({', '.join(v['refused'])} refused: MySQL cannot create its table)" if v["refused"] else ""
        print(f"{backend}, {scoring} scoring: oracle em {v['oracle_em']:.4f} on "
              f"{out['tasks'] - len(v['refused'])} DB Bench dev tasks{refused}, {v['episodes_per_s']:.0f} episodes/s "
              f"({v['vs_bare']:.2f}x of a bare {backend} episode, {out['bare_episodes_per_s']:.0f}/s)")
    print(f"{backend}: first round (nothing cached) {out['first_round_episodes_per_s']:.0f} episodes/s")
    server = f" + server {out['server_peak_rss_mb']:.0f} MB (started in {out['server_start_s']:.2f} s)" \
        if backend == "mariadb" else ""
    print(f"{backend}: peak RSS {out['peak_rss_mb']:.0f} MB{server}")


def gold_check(path: str, backend: str) -> dict:
    """Return how many modify tasks of ``path`` have a gold statement whose effect on ``backend`` has AgentBench's
    hash equal to the task's ``answer_md5``, and the others with the statement's reply."""
    from agentrl.core.io import DataError

    tasks = [t for t in load_dbbench(path) if t["metadata"]["kind"] == "modify"]
    failed = {}
    for t in tasks:
        if backend == "mariadb":
            from agentrl.envs.sql import mariadb

            env = mariadb.MariaDBEnv()
        else:
            env = SQLEnv()
        try:
            env.reset(**t)
        except DataError as exc:
            failed[t["id"]] = f"table refused: {exc}"
            continue
        try:
            out = env.execute_sql(t["metadata"]["sql"])
            if sql_score("done", t, env)["agentbench"] != 1.0:
                failed[t["id"]] = out[:100]
        finally:
            env._close()
    return {"backend": backend, "path": str(path), "modify": len(tasks), "reproduced": len(tasks) - len(failed),
            "failed": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "mariadb", "both"], default="both")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (for --backend both)")
    parser.add_argument("--gold", action="append", metavar="PATH",
                        help="a DB Bench JSONL file: count the modify tasks whose gold reproduces answer_md5")
    args = parser.parse_args()
    if args.gold:
        for path in args.gold:
            for backend in (("sqlite", "mariadb") if args.backend == "both" else (args.backend,)):
                out = gold_check(path, backend)
                print(f"{backend}: {out['reproduced']} of {out['modify']} modify golds in {path} reproduce "
                      f"answer_md5" + "".join(f"\n  {i}: {why}" for i, why in out["failed"].items()))
        return
    if args.backend != "both":
        out = measure(args.backend)
        print(json.dumps(out)) if args.json else report(out)
        return
    results = {}
    for backend in ("sqlite", "mariadb"):  # one process each: separate peak RSS
        proc = subprocess.run([sys.executable, __file__, "--backend", backend, "--json"], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            print(f"{backend}: failed\n{proc.stderr[-2000:]}")
            continue
        results[backend] = json.loads(proc.stdout.strip().splitlines()[-1])
        report(results[backend])
    path = ROOT / "runs" / "bench" / "sql_env.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
