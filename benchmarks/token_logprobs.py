"""The tokens a multi-turn GRPO step samples against the tokens its loss reads: per-token log-probs, one real step.

In TRL's tool loop a rollout's later turns are generated from token ids (the prompt, the tokens sampled so far, the
tool result's tokens) and the loss reads the concatenation; when a chat template re-tokenises earlier turns
differently the loss scores other tokens than were sampled (issue 44, item 3; agentrl checks the template at every
GRPO start: agentrl.train.template_check). This script runs one GRPO step of SmolLM2 on the SQL environment through
agentrl's own trainer (the preset's merge-for-generation and shared-prefix speed-ups included) and compares, for every
sampled token, the log-probability under which ``generate`` sampled it (its raw logits / temperature, recorded
during the rollouts) with the log-probability the loss's forward pass gives the same token at the same place. Every
generated turn is located in the loss's rows by its tokens (the turn's input, then what it sampled): a turn that
cannot be located is a token mismatch and is counted.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/token_logprobs.py                      # cpu_smol, SQL, fp32, a 10-step SFT adapter
    uv run python benchmarks/token_logprobs.py --precision bf16     # the same on bf16 autocast
    uv run python benchmarks/token_logprobs.py --records runs/bench/token_logprobs/records.json   # compare again

Prints the largest and mean absolute difference per turn kind (the first turn, turns after a tool result) and where
each generated turn is: located in a loss row, in a row masked out whole, in no loss row (a skipped group's rows,
which compact micro-batches leave out) or unlocated; writes runs/bench/token_logprobs.json and the raw turns and loss
rows (records.json). Differences of float rounding (1e-5 in fp32, tenths of a nat in bf16: the sampling pass reads
merged LoRA weights and a key/value cache, the loss the unmerged adapter in one forward) say the tokens match; a
mismatch shows as unlocated turns or differences of whole nats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import grpo_step  # the GRPO step benchmark's preset and adapter set-up; scripts run from benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def record_generations(eos_ids: list[int], temperature: float) -> tuple[list[dict], object]:
    """Wrap ``generate`` of every transformers model so that each call also records, per row, its input tokens
    (the attended ones), the tokens it sampled up to the first EOS and their log-probs (raw logits / temperature);
    return ``(records, restore)``."""
    import torch
    from transformers.generation.utils import GenerationMixin

    original, records = GenerationMixin.generate, []

    def generate(self, *args, **kwargs):
        kwargs.update(output_logits=True, return_dict_in_generate=True)
        out = original(self, *args, **kwargs)
        ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        width = ids.size(1)
        logps = torch.stack(out.logits, dim=1).float().div(temperature).log_softmax(-1)
        for row in range(ids.size(0)):
            sampled = out.sequences[row, width:].tolist()
            cut = next((i + 1 for i, t in enumerate(sampled) if t in eos_ids), len(sampled))
            prompt = ids[row][mask[row].bool()].tolist() if mask is not None else ids[row].tolist()
            records.append({"prompt": prompt, "sampled": sampled[:cut],
                            "logps": [logps[row, i, t].item() for i, t in enumerate(sampled[:cut])]})
        return out.sequences

    GenerationMixin.generate = generate
    return records, lambda: setattr(GenerationMixin, "generate", original)


def compare(generations: list[dict], losses: list[dict]) -> dict:
    """Return the per-turn comparison: every generated turn located in a loss row (its input tokens, then its
    sampled tokens, as a prefix of the row's prompt + completion), and the absolute log-prob differences of its
    tokens, split by first turns and turns after a tool result (a turn whose input continues another generated
    turn). A turn in a row the loss masks out whole (a group of equal rewards, which agentrl's ``skip_equal_groups``
    takes out of the loss, or a rollout TRL's ``mask_truncated_completions`` drops) carries no loss and is counted
    apart: its completion is not attended, so the pass gives its tokens no comparable log-prob. So is a turn whose
    input is in no loss row: agentrl's compact micro-batches leave out the rows without loss tokens, so a skipped
    group's rows can be absent rather than masked. A turn that is neither is a mismatch (``unlocated``)."""
    rows = []
    for batch in losses:
        width = batch["width"]
        for ids, mask, logps in zip(batch["ids"], batch["mask"], batch["logps"], strict=True):
            prompt = [t for t, m in zip(ids[:-width], mask[:-width], strict=True) if m]
            rows.append((prompt + ids[-width:], len(prompt), logps, any(mask[-width:])))
    ends = [g["prompt"] + g["sampled"] for g in generations]
    kinds = ("first turn", "after a tool result")
    diffs = {k: [] for k in kinds}
    counts = {k: {"turns": 0, "located": 0, "masked": 0, "absent": 0, "unlocated": 0} for k in kinds}
    for g in generations:
        n = len(g["prompt"])
        kind = kinds[any(len(e) < n and g["prompt"][:len(e)] == e for e in ends)]
        counts[kind]["turns"] += 1
        outcome = "absent"
        for tokens, start, logps, read in rows:
            if tokens[:n] != g["prompt"]:
                continue
            outcome = "unlocated"  # its input is in the row: its sampled tokens must follow
            if tokens[n:n + len(g["sampled"])] == g["sampled"]:
                outcome = "located" if read else "masked"
                if read:
                    kept = min(len(g["sampled"]), len(tokens) - n)  # TRL cuts a turn at the completion budget
                    diffs[kind] += [abs(g["logps"][k] - logps[n - start + k]) for k in range(kept)]
                break
        counts[kind][outcome] += 1
    return {kind: {**counts[kind], "tokens": len(d), "max_abs_diff": max(d, default=0.0),
                   "mean_abs_diff": statistics.fmean(d) if d else 0.0} for kind, d in diffs.items()}


def table(result: dict) -> str:
    """Return the markdown table of :func:`compare`'s result."""
    lines = ["| turns | generated | located in the loss | in rows masked out whole | in no loss row | unlocated "
             "| tokens | largest abs diff | mean abs diff |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, r in result.items():
        lines.append(f"| {kind} | {r['turns']} | {r['located']} | {r['masked']} | {r['absent']} | {r['unlocated']} "
                     f"| {r['tokens']} | {r['max_abs_diff']:.2e} | {r['mean_abs_diff']:.2e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--env", default="sql")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a preset value, as agentrl's --set")
    ap.add_argument("--sft-steps", type=int, default=10, help="SFT steps of the adapter built when the preset's is "
                                                               "missing (0: a fresh LoRA on the base model)")
    ap.add_argument("--records", help="a records.json an earlier run wrote: compare its turns again, train nothing")
    args = ap.parse_args()
    records = Path(args.records).resolve() if args.records else None  # a path from the caller's directory
    os.chdir(ROOT)
    if records:
        saved = json.loads(records.read_text())
        print(table(compare(saved["generations"], saved["losses"])))
        return
    from agentrl.train import grpo
    from agentrl.train.configs import trl_args
    from agentrl.train.models import load_for_training, prepare_backend

    sets = [f"grpo.model.cpu_precision={args.precision}", "grpo.num_iterations=1", *args.sets]
    preset = grpo_step.load_preset(args.config, args.env, sets, "after", args.sft_steps)
    cfg = preset.grpo()
    cfg.trl["max_steps"] = 1
    out = ROOT / "runs" / "bench" / "token_logprobs"
    backend, _ = prepare_backend(cfg.model)
    targs = trl_args(cfg, grpo.derived_args(cfg, backend, out))
    task = grpo.build_task(cfg, preset.data)
    rows = grpo.training_rows(cfg, task, grpo.train_rows(cfg, preset.heldout, preset.data))
    loaded = load_for_training(cfg.model, adapter=cfg.adapter, seed=targs.seed,
                               gradient_checkpointing=cfg.gradient_checkpointing)
    loaded.tokenizer.padding_side = "left"
    trainer = grpo.make_trainer(cfg, targs, loaded, task, rows)
    eos = trainer.eos_token_ids if hasattr(trainer, "eos_token_ids") else [loaded.tokenizer.eos_token_id]
    generations, restore = record_generations(list(eos), targs.temperature)
    losses, scorer = [], trainer._get_per_token_logps_and_entropies

    def scored(model, input_ids, attention_mask, logits_to_keep, *a, **k):
        result = scorer(model, input_ids, attention_mask, logits_to_keep, *a, **k)
        if model.training and not trainer.state.global_step:  # the loss's pass, before the optimiser has stepped
            losses.append({"ids": input_ids.tolist(), "mask": attention_mask.tolist(), "width": logits_to_keep,
                           "logps": result[0].detach().float().tolist()})
        return result

    trainer._get_per_token_logps_and_entropies = scored
    t = time.perf_counter()
    try:
        trainer.train()
    finally:
        restore()
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.json").write_text(json.dumps({"generations": generations, "losses": losses}))
    result = compare(generations, losses)
    print(f"one GRPO step, {args.config}, env {args.env}, {args.precision} (bf16 autocast: {bool(targs.bf16)}), "
          f"{len(generations)} generated turns, {sum(len(b['ids']) for b in losses)} loss rows, "
          f"{time.perf_counter() - t:.0f} s")
    print(table(result))
    (out.parent / "token_logprobs.json").write_text(json.dumps(
        {"config": args.config, "env": args.env, "precision": args.precision, "bf16": bool(targs.bf16),
         "adapter": cfg.adapter, "result": result}, indent=1))
    print(f"wrote {out.parent / 'token_logprobs.json'}")


if __name__ == "__main__":
    main()
