"""A long SQL GRPO run from an SFT adapter: does the policy move, on validation and on held-out DB Bench?

    uv run agentrl models prepare smollm2
    uv run python benchmarks/cpu_precision.py          # bf16 where this CPU has it (~60 s a step instead of ~100)
    uv run python benchmarks/grpo_long.py --lr 1e-4 --steps 40    # ~70 min on 2 cores -> runs/long/

The SFT adapter is ``--adapter`` or the one benchmarks/grpo_step.py builds (40 SFT steps on oracle demonstrations of
the synthetic tables of seed 0, ``runs/bench/sft_sql/``). GRPO (cpu_smol's ``[grpo]``, SQL with
benchmarks/learning.py's trainer values, beta 0.01 so KL is logged) trains on the tables of seed 1, which the SFT
never saw; their last ``--validation`` tasks are the validation slice, evaluated before the first step, every 10
steps and after the last. Then the SFT and the GRPO adapter run the agent on every held-out DB Bench dev task, with
the paired difference and its 95% bootstrap interval. Per-step logs: ``runs/long/<name>_history.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import learning  # the learning benchmark's phases; scripts run from benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--validation", type=int, default=8, help="the validation slice: the seed-1 pool's last tasks")
    ap.add_argument("--adapter", help="the SFT adapter (default: benchmarks/grpo_step.py's, built when missing)")
    args = ap.parse_args()
    os.chdir(ROOT)
    from transformers import TrainerCallback

    from agentrl.app.presets import load
    from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci
    from agentrl.envs import registry
    from agentrl.train.grpo import run_grpo
    from grpo_step import sft_adapter

    adapter = args.adapter or sft_adapter(args.config, "sql", 40)
    out, name = ROOT / "runs" / "long", f"long_grpo_sql_lr{args.lr:g}"
    preset = load(args.config).with_layer({"grpo": {
        **learning.SQL_RUN, "env": "sql", "name": name, "adapter": adapter, "max_steps": args.steps,
        "learning_rate": args.lr, "beta": 0.01, "eval_questions": 0, "eval_every": 10, "skip_equal_groups": True,
        "save_strategy": "steps", "save_steps": 10,
        "sql": {"validation": args.validation, "synthetic_seed": 1}}}, "benchmarks/grpo_long.py")
    settings = preset.grpo()
    val = registry.split_rows(registry.get("sql"), "validation", settings.env_settings, preset.data)
    history = out / f"{name}_history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text("")

    class History(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kwargs):
            with history.open("a") as f:
                f.write(json.dumps({"step": state.global_step, "t": time.time(), **(logs or {})}) + "\n")

    evals: list = []
    t = time.perf_counter()
    res = run_grpo(settings, preset.heldout, preset.data, runs=out / "runs", overwrite=True,
                   eval_run=preset.eval().run, source=preset.describe(),
                   callbacks=[History(), learning.validation_eval(preset, settings, val, out / name, evals)])
    grpo_seconds = time.perf_counter() - t
    held = learning.heldout_rows(preset, "sql", None)
    shape = learning.EvalShape(preset.eval().local.max_new_tokens)
    table, items = {}, {}
    for label, path in (("sft", adapter), ("grpo", str(res.out / "adapter"))):
        table[label] = learning.evaluate(preset, "sql", held, path, f"sql_{label}_{args.lr:g}", out, shape)
        items[label] = learning.outcomes(out, f"sql_{label}_{args.lr:g}", "em")
    ids = sorted(items["sft"])
    a, b = [items["sft"][i] for i in ids], [items["grpo"][i] for i in ids]
    hist = [json.loads(line) for line in history.read_text().splitlines()]
    rewards = [h["reward"] for h in hist if "reward" in h]
    q = max(1, len(rewards) // 4)
    result = {"lr": args.lr, "steps": args.steps, "adapter": adapter, "grpo_seconds": round(grpo_seconds),
              "heldout": table, "sft_ci": bootstrap_ci(a), "grpo_ci": bootstrap_ci(b),
              "paired_grpo_minus_sft": paired_bootstrap_ci(a, b),
              "reward_first_quarter": sum(rewards[:q]) / q, "reward_last_quarter": sum(rewards[-q:]) / q,
              "validation": [{"step": e["step"], "em": e.get("em")} for e in evals]}
    (out / f"{name}_result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
