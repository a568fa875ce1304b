"""SQL GRPO's hyperparameters chosen on the validation slice of the widened generator, never on DB Bench dev.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/sql_validation.py          # the SFT adapter and its validation em (0.2-0.7: can choose)
    uv run python benchmarks/sql_sweep.py               # every arm -> runs/bench/sql_sweep/ (~22 min an arm, 2 cores)
    uv run python benchmarks/sql_sweep.py --arms base,lr3e-4 --steps 6 --eval-every 3
    uv run python benchmarks/sql_sweep.py --report      # the table of the arms run so far, trains nothing

Every arm continues the SFT adapter benchmarks/sql_validation.py builds (one epoch of oracle demonstrations of the
seed-0 tables) and trains with benchmarks/learning.py's SQL GRPO values (tables of seed 1, which the SFT never saw;
equal-reward groups skipped; 16 rollouts a step) on the seed-1 pool without its last ``--val`` tasks, which are the
validation slice: evaluated greedily with the SQL environment's one evaluation budget (``[eval.sql]``, what every
evaluation of it reads) before training (once: the SFT adapter, the same for every arm), every ``--eval-every``
steps and after the last. The learning-rate arms change it from ``base`` (:data:`LR_ARMS`); then beta, the number of
generations (rollouts a step kept at 16, so fewer tasks a step), the answer reward (execution match or the dense
``sql_overlap``) and the sampling temperature each change one thing from the best learning-rate arm
(:data:`ON_BEST`). Printed and written (``sweep.md``, ``sweep.json``): each arm's validation em per evaluated step
with its 95% bootstrap interval, the paired difference to the SFT adapter at its best step, the mean training reward
and KL of its last steps. The choice (arm and step) is the best validation em; ties go to the fewer steps, then to
``base``.
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
OUT = ROOT / "runs" / "bench" / "sql_sweep"
ADAPTER = ROOT / "runs" / "bench" / "sql_validation" / "runs" / "sft" / "sqlval_sft" / "adapter"
ANSWER_REWARDS = ("sql_execution", "sql_overlap")
BASE = {"learning_rate": 1e-4, "beta": 0.01, "num_generations": 4, "reward": "sql_execution", "temperature": 1.0}
# first the learning rate (one change each from base), then one change each from the best of those (by validation
# em: its learning rate, beta, generations, reward and temperature); 16 rollouts a step throughout
# (num_generations 8: two tasks)
LR_ARMS = {"base": {}, "lr3e-5": {"learning_rate": 3e-5}, "lr3e-4": {"learning_rate": 3e-4}}
ON_BEST = {"beta0": {"beta": 0.0}, "g8": {"num_generations": 8}, "overlap": {"reward": "sql_overlap"},
           "t0.7": {"temperature": 0.7}}  # rollouts nearer the greedy turns every evaluation takes
ARMS = {**LR_ARMS, **ON_BEST}


def arm_layer(name: str, values: dict, adapter: str, steps: int, val: int, eval_every: int, fmt: float) -> dict:
    """Return the ``[grpo]`` layer of one arm (its ``values``: :data:`BASE`'s keys) over the preset, its answer reward
    weighted 1 beside the preset's ``format`` weight ``fmt`` (the other answer reward 0)."""
    rewards = {**{r: 0.0 for r in ANSWER_REWARDS}, values["reward"]: 1.0, "format": fmt}
    return {"grpo": {**learning.GRPO_RUN["sql"]["grpo"], "env": "sql", "name": f"sweep_{name}", "adapter": adapter,
                     "max_steps": steps, "learning_rate": values["learning_rate"], "beta": values["beta"],
                     "num_generations": values["num_generations"], "temperature": values["temperature"],
                     "per_device_train_batch_size": 4,
                     "gradient_accumulation_steps": 4, "eval_questions": 0, "eval_every": eval_every,
                     "skip_equal_groups": True,
                     "sql": {"validation": val, "synthetic_seed": 1, "rewards": rewards}}}


def arm_values(name: str, records: dict) -> dict:
    """Return the values arm ``name`` trains with: :data:`BASE` with its change, or for an arm of :data:`ON_BEST`
    the best learning-rate arm's values (those run so far, by best validation em) with its change."""
    if name in LR_ARMS:
        return {**BASE, **LR_ARMS[name]}
    runs = {k: r for k, r in records.items() if k in LR_ARMS}
    if not runs:
        raise SystemExit(f"arm {name} changes the best learning-rate arm: run {', '.join(LR_ARMS)} first")
    best = max(runs, key=lambda k: (_best(runs[k])["em"], k == "base"))
    return {**BASE, **runs[best]["values"], **ON_BEST[name]}


def _best(record: dict) -> dict:
    """Return the record's evaluation with the best validation em after training (the fewest steps on a tie)."""
    return max(record["evals"][1:] or record["evals"], key=lambda e: (e["em"], -e["step"]))


def run_arm(config: str, name: str, values: dict, adapter: str, steps: int, val: int, eval_every: int,
            baseline: dict | None):
    """Train one arm with ``values`` and return its record (validation evaluations, training reward and KL,
    seconds); the step-0 evaluation is ``baseline``'s when given (the SFT adapter's, the same for every arm)."""
    from agentrl.app.presets import load
    from agentrl.envs import registry
    from agentrl.train.grpo import run_grpo

    base = load(config)
    fmt = base.grpo().envs["sql"].rewards.get("format", 0.0) if "sql" in base.grpo().envs else 0.0
    preset = base.with_layer(arm_layer(name, values, adapter, steps, val, eval_every, fmt),
                             "benchmarks/sql_sweep.py")
    settings = preset.grpo()
    rows = registry.split_rows(registry.get("sql"), "validation", settings.env_settings, preset.data)
    evals: list = [baseline] if baseline else []
    t = time.perf_counter()
    res = run_grpo(settings, preset.heldout, preset.data, runs=OUT / "runs", overwrite=True,
                   eval_run=preset.eval().run, source=preset.describe(),
                   callbacks=[learning.validation_eval(preset, settings, rows, OUT / name, evals)])
    hist = [h for h in res.metrics["history"] if h.get("reward") is not None]
    last = hist[-max(1, len(hist) // 3):]
    return {"arm": name, "values": values, "steps": steps, "seconds": round(time.perf_counter() - t),
            "budget": {"max_turns": settings.budget.max_turns, "max_new_tokens": settings.budget.max_new_tokens},
            "validation_tasks": len(rows), "evals": [e if e is baseline else _eval(e, OUT / name) for e in evals],
            "reward_last": sum(h["reward"] for h in last) / len(last),
            "kl_last": sum(h.get("kl", 0.0) for h in last) / len(last),
            "groups_skipped": sum(h.get("groups/skipped", 0) for h in hist),
            "groups_total": sum(h.get("groups/total", 0) for h in hist)}


def _eval(e: dict, out: Path) -> dict:
    """Return the parts of one validation evaluation the table reads: step, em, exec and each task's em (read from
    the evaluation's trajectories under ``out/eval/step_<n>/``)."""
    items = learning.outcomes(out, f"step_{e['step']}", "em")
    return {"step": e["step"], "em": e.get("em"), "exec": e.get("exec"), "items": items}


def report(records: dict) -> str:
    """Return the sweep's markdown table and its choice."""
    from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci

    lines = ["| arm | change | step: validation em [95% CI] | best vs SFT (paired 95% CI) | reward (last third) "
             "| KL (last third) | groups skipped | min |", "|---|---|---|---|---|---|---|---|"]
    best = None
    for name, r in records.items():
        sft = r["evals"][0]
        cells = []
        for e in r["evals"]:
            items = list(e["items"].values())
            _, lo, hi = bootstrap_ci(items) if items else (0.0, float("nan"), float("nan"))
            cells.append(f"{e['step']}: {e['em']:.3f} [{lo:.2f}, {hi:.2f}]")
        top = _best(r)
        ids = sorted(sft["items"])
        diff = paired_bootstrap_ci([sft["items"][i] for i in ids], [top["items"][i] for i in ids]) \
            if top is not sft else None
        change = ", ".join(f"{k} {v}" for k, v in {**BASE, **r["values"]}.items() if v != BASE[k]) or "-"
        lines.append(f"| {name} | {change} | {'; '.join(cells)} | step {top['step']}: "
                     + (f"{diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]" if diff else "-")
                     + f" | {r['reward_last']:.3f} | {r['kl_last']:.4f} | {r['groups_skipped']:.0f}/"
                       f"{r['groups_total']:.0f} | {r['seconds'] / 60:.0f} |")
        key = (top["em"], -top["step"], name == "base")
        if best is None or key > best[0]:
            best = (key, name, top["step"], sft["em"])
    if best:
        lines.append(f"\nchosen on validation: arm {best[1]} at step {best[2]} (em {best[0][0]:.3f})"
                     + ("" if best[0][0] > best[3] else f"; no arm beats the SFT adapter's em {best[3]:.3f} (step 0)"))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of: " + ", ".join(ARMS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--eval-every", type=int, default=6)
    ap.add_argument("--val", type=int, default=28, help="validation tasks: the last ones of the seed-1 tables")
    ap.add_argument("--adapter", default=str(ADAPTER), help="the SFT adapter (benchmarks/sql_validation.py's)")
    ap.add_argument("--report", action="store_true", help="print the table of the arms run so far")
    args = ap.parse_args()
    os.chdir(ROOT)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {unknown} (known: {', '.join(ARMS)})")
    path = OUT / "sweep.json"
    records = json.loads(path.read_text()) if path.is_file() else {}
    if not args.report:
        if not (Path(args.adapter) / "adapter_config.json").is_file():
            ap.error(f"no SFT adapter at {args.adapter}: run benchmarks/sql_validation.py first")
        for name in arms:
            baseline = next((r["evals"][0] for r in records.values() if r["evals"] and r["evals"][0]["step"] == 0
                             and r["validation_tasks"] == args.val), None)
            values = arm_values(name, records)
            print(f"--- arm {name}: {values}", flush=True)
            records[name] = run_arm(args.config, name, values, args.adapter, args.steps, args.val, args.eval_every,
                                    baseline)
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(records, indent=2))
    table = report(records)
    (OUT / "sweep.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
