"""Preference variants on the learning benchmark's SQL pairs, chosen on the validation slice (never the held-out set).

    uv run python benchmarks/learning.py --envs sql     # the SFT adapter, its sampled pairs, its DPO -> runs/learning/
    uv run python benchmarks/dpo_sweep.py               # -> runs/learning/dpo_sweep.{json,md} (~20 min, 2 cores)

Every variant continues the learning run's SFT adapter on the run's own (success, failure) pairs with its ``[dpo]``
sizes (24 steps of 4 pairs, lr 5e-5), and differs from the run's DPO (TRL's sigmoid loss, beta 0.1) only in its
loss: ``rpo`` adds the NLL of the chosen completion (TRL's ``loss_type = ["sigmoid", "sft"]``, what ``rpo_alpha``
was before TRL 1.x), ``ipo`` is TRL's IPO loss (beta its regulariser). Each variant's adapter is saved every
``--every`` steps; the SFT adapter, the run's DPO and every saved step run the agent, greedy, on the validation slice
(``[grpo.sql] validation``: the last tasks of the synthetic tables GRPO and sampling draw from, never sampled or
trained on): em with its 95% bootstrap interval, the paired difference to SFT and the well-formed call share.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import learning  # the learning benchmark's phases; scripts run from benchmarks/
from learning_report import compare

ROOT = Path(__file__).resolve().parents[1]
# the run's DPO is TRL's default loss; each variant changes only its [dpo] loss fields
VARIANTS = {"rpo": {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, 1.0]}, "ipo": {"loss_type": ["ipo"]}}


def saver(out: Path, every: int):
    """Return a TrainerCallback that saves the trained adapter (without DPO's reference copy) and the tokenizer to
    ``out/step_<n>`` every ``every`` steps; the paths it wrote are in its ``saved`` list."""
    from transformers import TrainerCallback

    class Save(TrainerCallback):
        saved: list[tuple[int, str]] = []

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step % every == 0:
                path = out / f"step_{state.global_step}"
                model.save_pretrained(str(path), selected_adapters=["default"])
                processing_class.save_pretrained(str(path))
                Save.saved.append((state.global_step, str(path)))

    return Save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--run", help="the learning run's directory (its learning.json), relative to the current one "
                                   "(default: the repository's runs/learning)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--steps", type=int, default=learning.FULL["dpo_steps"], help="DPO steps of each variant")
    ap.add_argument("--every", type=int, default=8, help="save and evaluate every this many DPO steps")
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if bad := [v for v in variants if v not in VARIANTS]:
        ap.error(f"--variants: unknown {bad} (choose from {', '.join(VARIANTS)})")
    run = Path(args.run).resolve() if args.run else ROOT / "runs" / "learning"
    os.chdir(ROOT)
    if not (run / "learning.json").is_file():
        ap.error(f"--run: {run / 'learning.json'} not found (run benchmarks/learning.py --envs sql first)")
    result = json.loads((run / "learning.json").read_text())
    sql = result["methods"].get("sql", {})
    if not (sql.get("dpo") or {}).get("adapter"):
        ap.error(f"--run: {run} has no SQL DPO adapter (its DPO did not run)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentrl.app.presets import load
    from agentrl.core.io import write_json
    from agentrl.envs import registry
    from agentrl.train.dpo import run_dpo

    preset = load(args.config)
    sft_adapter = result["sft"]["sql"]["adapter"]
    grpo = preset.with_layer({"grpo": learning.grpo_layer(preset, "sql", learning.FULL, sft_adapter, False)},
                             "benchmarks/dpo_sweep.py").grpo()
    val = registry.split_rows(registry.get("sql"), "validation", grpo.env_settings, preset.data)
    out = run / "dpo_sweep"
    models = {"sft": sft_adapter, "dpo": sql["dpo"]["adapter"]}
    histories = {}
    for v in variants:
        p = preset.with_layer({"dpo": {"name": f"sweep_{v}", "data": str(run / "runs" / "sample" / "learning_sql"),
                                       "adapter": sft_adapter, "max_steps": args.steps,
                                       **VARIANTS[v]}}, f"benchmarks/dpo_sweep.py ({v})")
        save = saver(out / "adapters" / v, args.every)
        m = run_dpo(p.dpo(), p.heldout, runs=out / "runs", callbacks=[save], source=p.describe())
        histories[v] = m["history"]
        models.update({f"{v}@{step}": path for step, path in save.saved if step != args.steps})
        models[v] = str(m["out"] / "adapter")  # the last step's
    table, items = {"sql": {}}, {"sql": {}}
    for label, adapter in models.items():
        name = f"val_{label.replace('@', '_')}"
        table["sql"][label] = learning.evaluate(preset, "sql", val, adapter, name, out)
        items["sql"][label] = learning.outcomes(out, name, "em")
    compare(table, items)
    lines = [f"validation: {len(val)} SQL tasks ({', '.join(str(r['id']) for r in val[:3])}, ...)", "",
             "| model | em (95% CI) | vs SFT (paired 95% CI) | well-formed call share |", "|---|---|---|---|"]
    for label, r in table["sql"].items():
        diff = (f"{r['diff_vs_sft']:+.3f} [{r['diff_ci'][0]:+.3f}, {r['diff_ci'][1]:+.3f}]"
                if "diff_vs_sft" in r else "-")
        lines.append(f"| {label} | {r['success']:.3f} [{r['success_ci'][0]:.3f}, {r['success_ci'][1]:.3f}] | {diff} "
                     f"| {r['wellformed_call_share']:.2f} |")
    write_json(out.parent / "dpo_sweep.json", {"validation_ids": [str(r["id"]) for r in val], "table": table,
                                                "per_item": items, "histories": histories, "models": models})
    (out.parent / "dpo_sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
