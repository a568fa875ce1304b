"""Finished rows leaving the decode batch (agentrl.rollout.batch_decode) against ``generate`` keeping them.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/batch_decode.py                 # SmolLM2-135M, 16 DB Bench dev tasks, greedy and T=1
    uv run python benchmarks/batch_decode.py --tasks 8 --temperatures 0

The same SQL episodes (cpu_smol's [eval.sql]: DB Bench dev tasks, its 256-token budget, 16 episodes batched) run
through the agent loop twice per temperature in this process: the baseline with every row kept until the batch's
longest turn ends (transformers' ``generate``, with the other CPU decode paths on) and the loop whose finished rows
leave the batch. Printed: seconds per arm, the ratio, the decode passes and rows per pass, and (greedy) whether every
trajectory is the same in both arms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def arm(preset, path: str, model, tok, rows, temperature: float, leave: bool, out: Path) -> dict:
    """Run the episodes once; return seconds, passes and each episode's messages."""
    from dataclasses import replace

    import torch

    import agentrl.rollout.local as local
    from agentrl.core.io import iter_jsonl
    from agentrl.rollout.evaluate import run_eval, variant
    from agentrl.rollout.local import LocalConfig, LocalPolicy

    ev = preset.eval()
    name = f"T{temperature:g}_{'leave' if leave else 'keep'}"
    cfg = variant(ev, name=name, policy="local", env="sql",
                  run=replace(ev.run, concurrency=len(rows), progress=False, item_timeout=7200.0))
    budget = preset.budget("sql").max_new_tokens or 256  # the environment's evaluation budget (256: its default)
    policy = LocalPolicy(LocalConfig(model=path, max_new_tokens=budget, max_batch=len(rows),
                                     temperature=temperature, fast_decode="on"), model=model, tokenizer=tok)
    usable = local.usable
    if not leave:
        local.usable = lambda *a, **k: False  # the baseline: generate keeps every row to the end
    torch.manual_seed(0)
    try:
        t = time.perf_counter()
        m = run_eval(cfg, preset.data, rows=rows, overwrite=True, policy=policy, out_dir=out / name)
        seconds = time.perf_counter() - t
    finally:
        local.usable = usable
    episodes = {rec["id"]: json.dumps(rec["messages"], sort_keys=True)
                for _, rec in iter_jsonl(out / name / "trajectories.jsonl")}
    passes = policy.decode_passes
    return {"seconds": round(seconds, 1), "n": m["n"], "generate_calls": len(policy.batch_sizes),
            "decode_passes": len(passes), "rows_per_pass": round(sum(passes) / len(passes), 2) if passes else None,
            "episodes": episodes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    p.add_argument("--model", default="runs/models/smollm2-135m-instruct")
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--temperatures", default="0,1", help="comma-separated sampling temperatures (0 = greedy)")
    args = p.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentrl.app.presets import load
    from agentrl.core.cpu_precision import use_bf16
    from agentrl.core.io import write_json
    from agentrl.rollout.evaluate import load_rows, variant
    from agentrl.rollout.local import load_inference_model
    from agentrl.train.smol import ensure_model

    preset = load(args.config)
    path = str(ensure_model(args.model))
    model, tok = load_inference_model(path)
    rows = load_rows(variant(preset.eval(), env="sql", split="heldout", offset=0, limit=args.tasks), preset.data)
    out = Path("runs/benchmarks/batch_decode")
    result = {"model": args.model, "tasks": len(rows), "dtype": str(model.dtype), "bf16_generate": use_bf16("generate"),
              "arms": {}}
    for temperature in (float(x) for x in args.temperatures.split(",")):
        keep = arm(preset, path, model, tok, rows, temperature, False, out)
        leave = arm(preset, path, model, tok, rows, temperature, True, out)
        same = sum(keep["episodes"][k] == leave["episodes"].get(k) for k in keep["episodes"])
        ratio = keep["seconds"] / leave["seconds"]
        result["arms"][f"{temperature:g}"] = {
            "keep": {k: v for k, v in keep.items() if k != "episodes"},
            "leave": {k: v for k, v in leave.items() if k != "episodes"},
            "speedup": round(ratio, 2), "same_trajectories": same}
        print(f"temperature {temperature:g}: rows kept {keep['seconds']} s, rows leave {leave['seconds']} s = "
              f"{ratio:.2f}x ({leave['decode_passes']} decode passes, {leave['rows_per_pass']} rows per pass of "
              f"{len(rows)}); {same}/{len(rows)} trajectories identical"
              + (" (greedy: all should be)" if temperature == 0 else " (sampled: not expected to be)"))
    write_json(out / "result.json", result)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
