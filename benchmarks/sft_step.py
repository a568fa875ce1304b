"""An SFT step with and without the shared prompt prefix read once, in the same run (``[sft] share_prompt_prefill``).

    uv run agentrl models prepare smollm2
    uv run python benchmarks/sql_validation.py # builds the SQL demonstrations read here (runs/bench/...)
    uv run python benchmarks/sft_step.py           # cpu_smol's [sft], 8 steps a variant, interleaved in pairs

Both variants train a fresh LoRA from the same seed on the same batches (cpu_smol's ``[sft]`` on the curated oracle
demonstrations of the widened SQL tables, ``--data``), with LoRA dropout off so their losses can be compared step by
step; they alternate ``--rounds`` times so drift in the machine's speed falls on both. Printed: the seconds of each
variant's training loop per step, the ratio, and the largest difference between their per-step losses.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import learning  # the learning benchmark's SFT phase; scripts run from benchmarks/

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "runs" / "bench" / "sql_validation" / "runs" / "data" / "sqlval_sft"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--data", default=str(DATA), help="a curated SFT dataset (benchmarks/sql_validation.py's)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1, help="on / off pairs, alternating")
    args = ap.parse_args()
    os.chdir(ROOT)
    from agentrl.app.presets import load

    if not Path(args.data).is_dir():
        ap.error(f"no curated dataset at {args.data}: run benchmarks/sql_validation.py first")
    runs = ROOT / "runs" / "bench" / "sft_step"
    results: dict[str, list] = {"on": [], "off": []}
    for _ in range(args.rounds):
        for variant in ("off", "on"):
            preset = load(args.config).with_layer({"sft": {
                "share_prompt_prefill": variant, "logging_steps": 1, "model": {"lora": {"dropout": 0.0}}}},
                "benchmarks/sft_step.py")
            r = learning.run_sft_phase(preset, runs, False, args.data, name=f"sft_step_{variant}",
                                       max_steps=args.steps, check_questions=0)
            results[variant].append(r)
            print(f"{variant}: {r['train_seconds'] / args.steps:.1f} s a step, {r['tokens_per_s']:.0f} tokens/s",
                  flush=True)
    per_step = {v: sum(r["train_seconds"] for r in rs) / (len(rs) * args.steps) for v, rs in results.items()}
    losses = {v: [x["loss"] for x in rs[-1]["loss"]] for v, rs in results.items()}
    diff = max(abs(a - b) for a, b in zip(losses["on"], losses["off"], strict=True))
    print(f"\nSFT step ({args.config}, {args.steps} steps, {args.rounds} round(s)): off {per_step['off']:.1f} s, "
          f"on {per_step['on']:.1f} s: {per_step['off'] / per_step['on']:.2f}x; largest per-step loss difference "
          f"{diff:.2e} (losses {losses['off'][0]:.3f} -> {losses['off'][-1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
