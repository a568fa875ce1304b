"""A long SQL GRPO run from an SFT adapter: does the policy move, on validation and on held-out DB Bench?

    uv run agentrl models prepare smollm2
    uv run python benchmarks/cpu_precision.py          # bf16 where this CPU has it (~60 s a step instead of ~100)
    uv run python benchmarks/grpo_long.py --lr 1e-4 --steps 40    # ~70 min on 2 cores -> runs/long/
    uv run python benchmarks/grpo_long.py --reward sql_overlap --steps 12 --validation 16 --eval-every 4 --no-heldout

The SFT adapter is ``--adapter`` or the one benchmarks/grpo_step.py builds (40 SFT steps on oracle demonstrations of
the synthetic tables of seed 0, ``runs/bench/sft_sql/``). GRPO (cpu_smol's ``[grpo]``, SQL with
benchmarks/learning.py's trainer values, beta 0.01 so KL is logged) trains on the tables of seed 1, which the SFT
never saw; their last ``--validation`` tasks are the validation slice, evaluated before the first step, every 10
steps (``--eval-every``) and after the last. The reward is ``--reward`` (SQL's binary execution match or its dense
``sql_overlap``, each with the env's format weight): two runs that differ only there compare them on validation. Then
(unless ``--no-heldout``) the SFT and the GRPO adapter run the agent on every held-out DB Bench dev task, with
the paired difference and its 95% bootstrap interval (benchmarks/learning_report.compare). Per-step logs: GRPO's own
``runs/long/runs/grpo/<name>/log.jsonl``; the result: ``runs/long/<name>_result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import learning  # the learning benchmark's phases and table; scripts run from benchmarks/
from learning_report import compare

ROOT = Path(__file__).resolve().parents[1]
ANSWER_REWARDS = ("sql_execution", "sql_overlap")  # SQL's binary execution match and its dense partial credit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--validation", type=int, default=8, help="the validation slice: the seed-1 pool's last tasks")
    ap.add_argument("--reward", default="sql_execution", choices=ANSWER_REWARDS,
                    help="the answer reward, beside the env's format reward")
    ap.add_argument("--eval-every", type=int, default=10, help="validation every this many steps (and after the last)")
    ap.add_argument("--no-heldout", action="store_true", help="validation only: no held-out DB Bench evaluation")
    ap.add_argument("--adapter", help="the SFT adapter (default: benchmarks/grpo_step.py's, built when missing)")
    args = ap.parse_args()
    os.chdir(ROOT)
    from agentrl.app.presets import load
    from agentrl.envs import registry
    from agentrl.train.grpo import run_grpo
    from grpo_step import sft_adapter

    adapter = args.adapter or sft_adapter(args.config, "sql", 40)
    out, name = ROOT / "runs" / "long", f"long_grpo_sql_lr{args.lr:g}" + (
        "" if args.reward == "sql_execution" else f"_{args.reward}")
    # layers merge into the preset's rewards table (cpu_smol: sql_execution 1.0, format 0.2): the other answer reward
    # is set to 0 so the two arms differ only in it, both with the env's own format weight
    rewards = {**{r: 0.0 for r in ANSWER_REWARDS}, args.reward: 1.0, "format": registry.get("sql").rewards["format"]}
    preset = load(args.config).with_layer({"grpo": {
        **learning.GRPO_RUN["sql"]["grpo"], "env": "sql", "name": name, "adapter": adapter, "max_steps": args.steps,
        "learning_rate": args.lr, "beta": 0.01, "eval_questions": 0, "eval_every": args.eval_every,
        "skip_equal_groups": True, "save_strategy": "steps", "save_steps": 10,
        "sql": {"validation": args.validation, "synthetic_seed": 1, "rewards": rewards}}}, "benchmarks/grpo_long.py")
    settings = preset.grpo()
    val = registry.split_rows(registry.get("sql"), "validation", settings.env_settings, preset.data)
    evals: list = []
    t = time.perf_counter()
    res = run_grpo(settings, preset.heldout, preset.data, runs=out / "runs", overwrite=True,
                   eval_run=preset.eval().run, source=preset.describe(),
                   callbacks=[learning.validation_eval(preset, settings, val, out / name, evals)])
    grpo_seconds = time.perf_counter() - t
    table: dict = {"sql": {}}
    if not args.no_heldout:
        held = learning.heldout_rows(preset, "sql", None)
        items: dict = {"sql": {}}
        for label, path in (("sft", adapter), ("grpo", str(res.out / "adapter"))):
            table["sql"][label] = learning.evaluate(preset, "sql", held, path, f"{name}_{label}", out)
            items["sql"][label] = learning.outcomes(out, f"{name}_{label}", "em")
        compare(table, items)  # success with its interval; GRPO's paired difference to SFT with its interval
    rewards = [h["reward"] for h in res.metrics["history"] if h.get("reward") is not None]
    q = max(1, len(rewards) // 4)
    result = {"lr": args.lr, "steps": args.steps, "reward": args.reward, "adapter": adapter,
              "grpo_seconds": round(grpo_seconds), "heldout": table["sql"] or None,
              "reward_first_quarter": sum(rewards[:q]) / q, "reward_last_quarter": sum(rewards[-q:]) / q,
              "validation": [{"step": e["step"], **{k: e.get(k) for k in ("em", "exec", "overlap")}} for e in evals]}
    (out / f"{name}_result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
