"""Environment benchmark: episodes/s of each new environment's oracle, and the sandbox's cost per run_python.

    uv run python benchmarks/envs.py              # 20 text games, 100 GSM8K problems, 30 HumanEval problems
    uv run python benchmarks/envs.py --runs 50    # sandbox calls measured

Episodes run through the real agent loop (oracle policy, the env's tools, scoring) with the batch runner's
concurrency. The sandbox overhead is the median wall time of ``run_python("pass")`` against a baseline
measured in the same run: a bare ``python -I -S -c pass`` subprocess (what any process-per-run design pays);
the goal is a median under 50 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def oracle_rate(env: str, n: int) -> tuple[float, float]:
    """Return ``(episodes per second, mean success)`` of the env's oracle on its first ``n`` held-out items (the
    text game generates ``n`` dev-fold games; math and code read their held-out problems)."""
    from dataclasses import replace

    from agentrl.envs import registry
    from agentrl.rollout.evaluate import EvalConfig, build_policy, build_task, load_rows
    from agentrl.rollout.runner import RunConfig, run_batch

    settings = registry.get(env).settings()
    if env == "textgame":  # it generates as many games as its heldout split says
        settings = replace(settings, heldout=n)
    cfg = EvalConfig(env=env, split="heldout", policy="oracle", limit=n, envs={env: settings})
    task = build_task(cfg)
    rows = load_rows(cfg)
    policy = build_policy(cfg, task)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        m = run_batch(policy, task, rows, out, RunConfig(progress=False))  # the env's turn budget: task.max_turns
        seconds = time.perf_counter() - start
    return len(rows) / seconds, m["overall"]["em"]


def median_ms(fn, runs: int) -> float:
    """Return the median wall time of ``fn()`` in milliseconds over ``runs`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=20)
    ap.add_argument("--math", type=int, default=100)
    ap.add_argument("--code", type=int, default=30)
    ap.add_argument("--runs", type=int, default=30, help="sandbox calls per measurement")
    args = ap.parse_args(argv)

    from agentrl.envs.code.sandbox import SandboxLimits, isolation, run_python

    print(f"{'environment':<10} {'items':>6} {'episodes/s':>11} {'oracle success':>15}")
    for env, n in (("textgame", args.games), ("math", args.math), ("code", args.code)):
        rate, success = oracle_rate(env, n)
        print(f"{env:<10} {n:>6} {rate:>11.1f} {success:>15.3f}")
    limits = SandboxLimits()
    sandbox = median_ms(lambda: run_python("pass", limits), args.runs)
    bare = median_ms(lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True), args.runs)
    print(f"\nrun_python median {sandbox:.1f} ms ({isolation()} isolation); bare interpreter subprocess "
          f"{bare:.1f} ms; sandbox overhead x{sandbox / bare:.2f} of the baseline, "
          f"{'meets' if sandbox < 50 else 'misses'} the 50 ms goal")


if __name__ == "__main__":
    main()
