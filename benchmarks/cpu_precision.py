"""fp32 vs bf16 on this CPU: an SFT forward+backward (bf16 autocast, as the Trainer's ``bf16=True`` runs it) and
greedy generation (the model in bf16), SmolLM2-135M-Instruct, one run, ratios printed.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/cpu_precision.py  # ~1 min without AVX512-BF16, ~3 with -> runs/precision/cpu.json

Each kind of work is first timed on a small probe (1 x 32 tokens), then on a larger one (training 2 x 128 tokens,
generation 8 x (64 + 8)); when one precision is clearly slower on a probe (``--clear-ratio``, 2x apart) its figures
decide and the full measurement is skipped, and the full measurement itself stops at the first repetition that is
that far apart. On a CPU without AVX512-BF16 a full bf16 training step took 357-636 s (0.033x of fp32) and the run 48
minutes before the probes; with one probe, 4.4 minutes (greedy generation on 1 x 32 tokens was 1.4x apart, on the full
size 4.6x: overhead hides the precision at that size). Measured with both: docs/results.md.

The result is cached in ``runs/precision/cpu.json``; CPU training (``model.cpu_precision = "auto"``) and CPU
generation use bf16 only where it says bf16 is at least 5% faster (agentrl.core.cpu_precision). Without the
SmolLM2 model the tiny random model is measured instead, with a line saying so (its figures say little).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def interleaved(fns: dict, reps: int, clear_ratio: float = float("inf")) -> dict:
    """Return ``{name: median wall seconds}`` of up to ``reps`` calls of each function, after one warm-up call each,
    the functions taking turns (a load change on a shared machine then affects both alike); stops after the first
    repetition whose slower call took at least ``clear_ratio`` times the faster one."""
    times: dict = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
            print(f"  {name}: {times[name][-1]:.2f} s", flush=True)
        last = [v[-1] for v in times.values()]
        if max(last) >= clear_ratio * max(min(last), 1e-6):
            print(f"  {max(last) / max(min(last), 1e-6):.1f}x apart: no further repetition", flush=True)
            break
    return {name: round(statistics.median(v), 3) for name, v in times.items()}


def decide(rungs: list[tuple], full: tuple, reps: int, clear_ratio: float) -> tuple[str, dict, int]:
    """Return ``(what was measured, {name: seconds}, tokens)``: the first probe of ``rungs`` (``(label, functions,
    tokens)``, small first) whose precisions are ``clear_ratio`` apart, else the ``full`` one (:func:`interleaved`)."""
    for label, fns, tokens in rungs:
        timed = probe(fns, clear_ratio)
        if timed is not None:
            return f"{label} (probe: {clear_ratio:g}x apart or more)", timed, tokens
    label, fns, tokens = full
    return label, interleaved(fns, reps, clear_ratio), tokens


def probe(fns: dict, clear_ratio: float) -> dict | None:
    """Return ``{name: seconds}`` of one call of each function after a warm-up call each when the slower is at
    least ``clear_ratio`` times the faster (the decision is clear), else None (measure in full)."""
    for fn in fns.values():  # warm-up: one-time kernel set-up is not the precision's cost
        fn()
    times = {}
    for name, fn in fns.items():
        t = time.perf_counter()
        fn()
        times[name] = round(time.perf_counter() - t, 3)
    slow, fast = max(times.values()), max(min(times.values()), 1e-6)
    print(f"  probe: {', '.join(f'{k} {v:.2f} s' for k, v in times.items())} ({slow / fast:.1f}x apart)", flush=True)
    return times if slow / fast >= clear_ratio else None


def train_step(model, ids, bf16: bool) -> None:
    """One forward+backward of a causal-LM loss on ``ids`` (bf16 autocast when ``bf16``), gradients cleared."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def generate(model, ids, new_tokens: int) -> None:
    """Greedy generation of ``new_tokens`` tokens for every row of ``ids``."""
    import torch

    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table with ratios, write runs/precision/cpu.json; return 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="runs/models/smollm2-135m-instruct")
    p.add_argument("--train-batch", type=int, default=2)
    p.add_argument("--train-tokens", type=int, default=512)
    p.add_argument("--gen-batch", type=int, default=8)
    p.add_argument("--gen-prompt", type=int, default=300)
    p.add_argument("--gen-new", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--probe-tokens", type=int, default=32, help="tokens of the probe that may decide at once")
    p.add_argument("--clear-ratio", type=float, default=2.0,
                   help="on the probe, this far apart decides without the full measurement (>= 1)")
    p.add_argument("--out", default="runs/precision/cpu.json")
    args = p.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import platform

    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.core.cpu_precision import cpu_has_bf16
    from agentrl.core.io import write_json

    model_path = Path(args.model)
    if not model_path.is_dir():
        from agentrl.train.tiny import ensure_tiny_model

        print(f"{model_path}: not prepared (`agentrl models prepare smollm2`); measuring the tiny random model "
              "instead: its figures say little about a real model")
        model_path = Path("runs/models/tiny")
        ensure_tiny_model(str(model_path))
    torch.manual_seed(0)
    vocab = AutoModelForCausalLM.from_pretrained(str(model_path)).config.vocab_size
    train_ids = torch.randint(100, vocab - 1, (args.train_batch, args.train_tokens))
    gen_ids = torch.randint(100, vocab - 1, (args.gen_batch, args.gen_prompt))
    res = {"model": str(model_path), "cpu": platform.processor() or platform.machine(), "cpu_has_bf16": cpu_has_bf16(),
           "threads": torch.get_num_threads(), "load_avg": os.getloadavg()[0]}
    if args.clear_ratio < 1:
        p.error("--clear-ratio must be at least 1")
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    model.train()
    def train_rung(ids) -> tuple:
        return (f"{ids.shape[0]} x {ids.shape[1]} tokens forward+backward",
                {"train_fp32_s": lambda: train_step(model, ids, False),
                 "train_bf16_s": lambda: train_step(model, ids, True)}, ids.numel())

    def gen_rung(ids, new: int) -> tuple:
        return (f"{ids.shape[0]} x ({ids.shape[1]} + {new}) tokens greedy",
                {"generate_fp32_s": lambda: generate(model, ids, new),
                 "generate_bf16_s": lambda: generate(half, ids, new)}, ids.shape[0] * new)

    probe_rows = [train_ids[:1, :args.probe_tokens], train_ids[:2, :4 * args.probe_tokens]]
    res["train"], timed, train_tok = decide([train_rung(t) for t in probe_rows], train_rung(train_ids), args.reps,
                                            args.clear_ratio)
    res.update(timed)
    model.eval()
    half = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.bfloat16).eval()
    probe_gens = [(gen_ids[:1, :args.probe_tokens], min(4, args.gen_new)),
                  (gen_ids[:, :2 * args.probe_tokens], min(8, args.gen_new))]
    res["generate"], timed, gen_tok = decide([gen_rung(g, n) for g, n in probe_gens],
                                             gen_rung(gen_ids, args.gen_new), args.reps, args.clear_ratio)
    res.update(timed)
    res["train_bf16_speedup"] = round(res["train_fp32_s"] / res["train_bf16_s"], 3)
    res["generate_bf16_speedup"] = round(res["generate_fp32_s"] / res["generate_bf16_s"], 3)
    print(f"{res['model']} on {res['cpu']} ({res['threads']} threads, bf16 {'yes' if res['cpu_has_bf16'] else 'no'}, "
          f"load {res['load_avg']:.1f})")
    print("| work | fp32 s | bf16 s | bf16 speed-up | fp32 tokens/s | bf16 tokens/s |\n|---|---|---|---|---|---|")
    for kind, n in (("train", train_tok), ("generate", gen_tok)):
        f, b = res[f"{kind}_fp32_s"], res[f"{kind}_bf16_s"]
        print(f"| {res[kind]} | {f} | {b} | {res[f'{kind}_bf16_speedup']}x | {n / f:.0f} | {n / b:.0f} |")
    write_json(args.out, res)
    from agentrl.core.cpu_precision import use_bf16

    os.environ.pop("AGENTRL_CPU_PRECISION", None)
    print(f"wrote {args.out}: CPU training in {'bf16 autocast' if use_bf16('train') else 'fp32'}, "
          f"generation in {'bf16' if use_bf16('generate') else 'fp32'} (auto)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "lib"))
    sys.exit(main())
