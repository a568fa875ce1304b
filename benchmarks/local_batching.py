"""Local inference throughput: concurrent episodes batched into one generate call vs one conversation at a time.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/local_batching.py                     # SmolLM2-135M, 16 concurrent search episodes
    uv run python benchmarks/local_batching.py --model runs/models/tiny --episodes 32

The same held-out HotpotQA questions run through the agent loop (greedy, search tool over the preset's index)
twice in this process: ``max_batch = 1`` (the baseline: each turn its own ``generate`` call) and
``max_batch = episodes`` (pending turns share one left-padded, KV-cached call). Printed: questions/s, generated
tokens/s, the batch sizes seen, and the speed-up (goal: >= 3x at 16 concurrent episodes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(preset, model, tok, rows: list[dict], max_batch: int, max_new_tokens: int, out: Path) -> dict:
    """Run the episodes with one batching setting; return its throughput figures."""
    from dataclasses import replace

    from agentrl.core.io import iter_jsonl
    from agentrl.rollout.evaluate import run_eval, variant
    from agentrl.rollout.local import LocalConfig, LocalPolicy

    ev = preset.eval()
    # one at a time, the last episode waits for all others: no timeout for that
    cfg = variant(ev, name=f"batch{max_batch}", policy="local",
                  run=replace(ev.run, concurrency=len(rows), progress=False, item_timeout=7200.0))
    policy = LocalPolicy(LocalConfig(model=str(model), max_new_tokens=max_new_tokens, max_batch=max_batch),
                         model=model, tokenizer=tok)
    t = time.perf_counter()
    m = run_eval(cfg, preset.data, rows=rows, overwrite=True, policy=policy, out_dir=out / f"batch{max_batch}")
    seconds = time.perf_counter() - t
    tokens = sum(rec["usage"]["completion_tokens"] or 0
                 for _, rec in iter_jsonl(out / f"batch{max_batch}" / "trajectories.jsonl"))
    sizes = policy.batch_sizes
    return {"max_batch": max_batch, "episodes": m["n"], "seconds": round(seconds, 1),
            "questions_per_s": round(m["n"] / seconds, 3), "generate_calls": len(sizes),
            "mean_batch": round(sum(sizes) / max(1, len(sizes)), 2), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1) if tokens else None, "f1": m["overall"]["f1"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="cpu_smol")
    p.add_argument("--model", default="runs/models/smollm2-135m-instruct")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentrl.app.presets import load
    from agentrl.core.io import write_json
    from agentrl.data.pipeline import corpus_and_index
    from agentrl.rollout.evaluate import load_rows, variant
    from agentrl.rollout.local import load_inference_model
    from agentrl.train.smol import ensure_model

    preset = load(args.config)
    corpus_and_index(preset.settings("corpus"), preset.settings("index"), progress=False)
    model, tok = load_inference_model(ensure_model(args.model))
    # the first held-out questions of the search environment ([eval.search] heldout: the last of the QA file)
    rows = load_rows(variant(preset.eval(), env="search", split="heldout", qa=None, offset=0, limit=args.episodes),
                     preset.data)
    out = Path("runs/benchmarks/local_batching")
    one = run(preset, model, tok, rows, 1, args.max_new_tokens, out)
    batched = run(preset, model, tok, rows, args.episodes, args.max_new_tokens, out)
    speedup = batched["questions_per_s"] / one["questions_per_s"]
    result = {"model": args.model, "episodes": args.episodes, "max_new_tokens": args.max_new_tokens,
              "one_at_a_time": one, "batched": batched, "speedup": round(speedup, 2), "goal": 3.0}
    write_json(out / "result.json", result)
    for r in (one, batched):
        print(f"max_batch {r['max_batch']:>3}: {r['episodes']} episodes in {r['seconds']} s = "
              f"{r['questions_per_s']} questions/s, {r['tokens_per_s']} tokens/s, {r['generate_calls']} generate "
              f"calls (mean batch {r['mean_batch']}), f1 {r['f1']:.3f}")
    print(f"speed-up batched vs one at a time: {speedup:.2f}x (goal >= 3x at 16 concurrent episodes)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
