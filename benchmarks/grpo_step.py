"""Where a GRPO step's time goes, before and after agentrl's CPU speed-ups, measured in the same run.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/grpo_step.py --set grpo.max_completion_length=256   # cpu_smol, SQL, 2 steps a variant
    uv run python benchmarks/grpo_step.py --env search --steps 3
    uv run python benchmarks/grpo_step.py --set grpo.adapter=runs/sft/my_sft/adapter --variants after

Each variant builds a fresh trainer from the same preset and seed and runs ``--steps`` steps (4 items x 4
rollouts on cpu_smol). ``before`` is the step as it ran up to 2026-11-28 (the adapter unmerged while generating,
every copy of a group's prompt read in every turn and in the loss: TRL's own step); ``after`` is the preset as it is
now (``merge_for_generation``, ``share_prompt_prefill``, ``fast_decode``, ``compact_loss_batch``:
agentrl.train.lora_merge, shared_prefill, turn_cache, decode, loss_batch); ``issue32`` (``--variants
before,issue32,after``) leaves out the last two.
Per step: generation (the model's ``generate`` calls, counted with their rows and new tokens), tool calls (the
rest of TRL's tool loop: the environments' methods and the tokenisation of their results), rewards, the log-prob
forward passes TRL scores completions with, and the optimisation (loss forward, backward, optimiser step). A
variant's step time is its mean over all its steps (the first included: a GRPO step has no separate warm-up worth
leaving out at these sizes). The sampled completions differ between variants, so generation is also given per
1,000 generated tokens. The adapter is the preset's (``runs/sft/smol_sft/adapter``) where it exists, else one
built once by ``--sft-steps`` (40) SFT steps on the environment's oracle demonstrations (``runs/bench/sft_<env>/``,
~26 min here for SQL), else with ``--sft-steps 0`` a fresh LoRA.
Writes ``runs/bench/grpo_step_<env>.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path

import learning  # the learning benchmark's phases (oracle demonstrations, curation, SFT); scripts run from here

ROOT = Path(__file__).resolve().parents[1]
# what each variant changes on top of the preset (``after`` is the preset as it is)
OFF = {"merge_for_generation": "off", "share_prompt_prefill": "off", "fast_decode": "off", "compact_loss_batch": "off"}
VARIANTS = {"before": {"grpo": OFF},
            # issue 32's two speed-ups as they stood on 2026-11-28 (the first-turn prefix and the loss's repeated
            # prompts, now with the turn cache and the loss's common prefix too), without issue 46's two
            "issue32": {"grpo": {"fast_decode": "off", "compact_loss_batch": "off"}},
            "after": {}}


class Timers(dict):
    def add(self, key: str, value: float) -> None:
        self[key] = self.get(key, 0.0) + value

    def wrap(self, key: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(key, time.perf_counter() - t)

        return timed


def sft_adapter(config: str, env: str, steps: int) -> str:
    """Return the SFT adapter the benchmark starts from when the preset's does not exist: ``steps`` LoRA SFT steps
    (the preset's ``[sft]``) on oracle demonstrations of ``env``'s training tasks, built once under
    ``runs/bench/sft_<env>/``."""
    from agentrl.app.presets import load

    runs = ROOT / "runs" / "bench" / f"sft_{env}"
    adapter = runs / "sft" / "smol_sft" / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        preset = load(config)
        learning.oracle(preset, runs, f"smol_{env}_oracle", env=env, split="train", qa=None, offset=0, limit=None)
        data, _ = learning.curate_export(preset, runs, [f"smol_{env}_oracle"])
        learning.run_sft_phase(preset, runs, False, str(data), max_steps=steps)
    return str(adapter)


def load_preset(config: str, env: str, sets: list[str], variant: str, sft_steps: int):
    """Return the preset of one variant: ``config`` with ``--set`` values, the env and the variant's layer."""
    from agentrl.app.presets import load

    preset = load(config, sets)
    layer = {"grpo": {"env": env, "name": f"bench_{variant}", "eval_questions": 0, "report_to": [],
                      **VARIANTS[variant].get("grpo", {})}}
    adapter = preset.value("grpo.adapter")
    if adapter and not (ROOT / adapter / "adapter_config.json").is_file():
        if sft_steps:
            layer["grpo"]["adapter"] = sft_adapter(config, env, sft_steps)
        else:
            print(f"{adapter} does not exist and --sft-steps is 0: a fresh LoRA on the base model")
            layer["grpo"]["adapter"] = ""
    return preset.with_layer(layer, "benchmarks/grpo_step.py")


def run_variant(preset, steps: int) -> dict:
    """Return one variant's per-step split (seconds per part, generate calls, generated tokens)."""
    from transformers import TrainerCallback

    from agentrl.train import grpo
    from agentrl.train.configs import trl_args
    from agentrl.train.models import load_for_training, prepare_backend

    cfg = preset.grpo()
    cfg.trl["max_steps"] = steps
    out = ROOT / "runs" / "bench" / cfg.name
    backend, _ = prepare_backend(cfg.model)
    args = trl_args(cfg, grpo.derived_args(cfg, backend, out))
    task = grpo.build_task(cfg, preset.data)
    rows = grpo.training_rows(cfg, task, grpo.train_rows(cfg, preset.heldout, preset.data))
    loaded = load_for_training(cfg.model, adapter=cfg.adapter, seed=args.seed,
                               gradient_checkpointing=cfg.gradient_checkpointing)
    loaded.tokenizer.padding_side = "left"
    timers, per_step = Timers(), []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            timers.clear()
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            per_step.append({**timers, "step": time.perf_counter() - self.t})

    funcs, weights = grpo.reward_functions(cfg)
    timed_funcs = [timers.wrap("rewards", f) for f in funcs]
    for timed, f in zip(timed_funcs, funcs, strict=True):
        timed.__name__ = getattr(f, "__name__", "reward")
    original = grpo.reward_functions
    grpo.reward_functions = lambda settings: (timed_funcs, weights)
    try:
        trainer = grpo.make_trainer(cfg, args, loaded, task, rows, [StepClock()])
    finally:
        grpo.reward_functions = original
    single = trainer._generate_single_turn

    def counted(prompt_ids, *a, **k):
        t = time.perf_counter()
        ids, logprobs = single(prompt_ids, *a, **k)
        timers.add("generation", time.perf_counter() - t)
        timers.add("generate_calls", 1)
        timers.add("rows", len(prompt_ids))
        timers.add("new_tokens", sum(len(c) for c in ids))
        timers.add("padded_tokens", len(prompt_ids) * max((len(c) for c in ids), default=0))
        timers.add("prompt_tokens", len(prompt_ids) * max((len(p) for p in prompt_ids), default=0))
        return ids, logprobs

    trainer._generate_single_turn = counted
    trainer._generate = timers.wrap("rollouts", trainer._generate)
    trainer._generate_and_score_completions = timers.wrap("generate_and_score",
                                                           trainer._generate_and_score_completions)
    trainer.train()
    mean = {k: sum(s.get(k, 0.0) for s in per_step) / len(per_step)
            for k in {k for s in per_step for k in s}}
    parts = {"generation (model)": mean.get("generation", 0.0),
             "tool calls (the rest of the tool loop)": mean.get("rollouts", 0.0) - mean.get("generation", 0.0),
             "rewards": mean.get("rewards", 0.0),
             "log-prob forward passes": mean["generate_and_score"] - mean["rollouts"] - mean.get("rewards", 0.0),
             "optimisation (forward, backward, step)": mean["step"] - mean["generate_and_score"]}
    hist = [h for h in trainer.state.log_history if "reward" in h]
    return {"step": mean["step"], "parts": parts, "per_step": per_step,
            "generate_calls": mean.get("generate_calls", 0), "new_tokens": mean.get("new_tokens", 0),
            "padded_tokens": mean.get("padded_tokens", 0), "prompt_tokens": mean.get("prompt_tokens", 0),
            "gen_s_per_1k_tokens": 1000 * mean.get("generation", 0.0) / max(mean.get("new_tokens", 0.0), 1.0),
            "tool_calls_per_rollout": sum(h.get("tools/call_frequency", 0.0) for h in hist) / max(1, len(hist)),
            "reward": [h["reward"] for h in hist], "bf16": bool(args.bf16),
            "groups_skipped": [f"{h.get('groups/skipped', 0):.0f}/{h.get('groups/total', 0):.0f}" for h in hist],
            "prompts_reused": [round(h.get("prompts/reused", 0.0), 3) for h in hist],
            "loss_columns_computed": [round(h.get("loss/columns_computed", 1.0), 3) for h in hist],
            "rollouts": cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps,
            "max_completion_length": cfg.max_completion_length}


def report(results: dict, env: str) -> None:
    """Print the split of every variant and the step-time ratio of the first to the last."""
    first = next(iter(results.values()))
    print(f"\nGRPO step, cpu_smol-shaped, env {env}: {first['rollouts']} rollouts a step, means over the steps")
    names = list(results)
    print(f"  {'part':<42}" + "".join(f"{n:>16}" for n in names))
    for part in first["parts"]:
        print(f"  {part:<42}" + "".join(f"{results[n]['parts'][part]:>14.1f} s" for n in names))
    print(f"  {'total step':<42}" + "".join(f"{results[n]['step']:>14.1f} s" for n in names))
    for key, label in (("generate_calls", "generate calls"), ("new_tokens", "generated tokens (all rows)"),
                       ("padded_tokens", "generated incl. padding (rows x longest)"),
                       ("gen_s_per_1k_tokens", "generation s per 1k generated tokens"),
                       ("tool_calls_per_rollout", "tool calls per rollout")):
        print(f"  {label:<42}" + "".join(f"{results[n][key]:>16.2f}" for n in names))
    for key, label in (("groups_skipped", "equal-reward groups skipped, per step"),
                       ("prompts_reused", "loss prompt columns not recomputed"),
                       ("loss_columns_computed", "loss columns computed (compact batch)")):
        print(f"  {label:<42}" + "".join(f"{' '.join(map(str, results[n][key])):>16}" for n in names))
    print(f"  {'bf16 training / completion budget':<42}" + "".join(
        f"{str(results[n]['bf16']) + ' / ' + str(results[n]['max_completion_length']):>16}" for n in names))
    if len(names) > 1:
        a, b = results[names[0]], results[names[-1]]
        print(f"step time {names[0]} / {names[-1]}: {a['step'] / b['step']:.2f}x; generation per 1k tokens: "
              f"{a['gen_s_per_1k_tokens'] / max(b['gen_s_per_1k_tokens'], 1e-9):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--env", default="sql")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--variants", default="before,after", help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a preset value, as agentrl's --set")
    ap.add_argument("--sft-steps", type=int, default=40, help="SFT steps of the adapter built when the preset's is "
                                                               "missing (0: a fresh LoRA instead)")
    args = ap.parse_args()
    os.chdir(ROOT)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown} (known: {', '.join(VARIANTS)})")
    results = {}
    for name in variants:
        print(f"--- variant {name}")
        results[name] = run_variant(load_preset(args.config, args.env, args.sets, name, args.sft_steps), args.steps)
    report(results, args.env)
    out = ROOT / "runs" / "bench" / f"grpo_step_{args.env}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": args.config, "env": args.env, "steps": args.steps, "sets": args.sets,
                               "variants": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
