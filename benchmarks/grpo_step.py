"""GRPO step-time breakdown on the tiny model: generation, tool execution, rewards, optimisation.

    uv run python benchmarks/grpo_step.py            # builds the demo's phases 00-03 first if they are missing
    uv run python benchmarks/grpo_step.py --search-method bm25   # the same step with lexical search only

Each GRPO step = rollouts (generation, with the search tool executed between turns) + reward functions +
log-prob/advantage bookkeeping + the optimiser step. Timers wrap the search backend (tool execution), each
reward function, TRL's ``_generate`` (rollouts, tools included) and ``_generate_and_score_completions``;
the step time comes from trainer callbacks. The first step (warm-up) is left out of the means.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Timers(dict):
    def add(self, key: str, seconds: float) -> None:
        self[key] = self.get(key, 0.0) + seconds

    def wrap(self, key: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(key, time.perf_counter() - t)

        return timed

    def wrap_async(self, key: str, fn):
        @functools.wraps(fn)
        async def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.add(key, time.perf_counter() - t)

        return timed


def ensure_inputs():
    """Return the demo preset (agentrl.app.presets.Preset), building the phases GRPO starts from if they are
    missing."""
    from agentrl.app.demo import demo_data, demo_eval, demo_sft
    from agentrl.app.presets import load
    from agentrl.data.pipeline import corpus_and_index

    preset = load("demo")
    if not (ROOT / "runs" / "sft" / "sft_demo" / "adapter" / "adapter_config.json").exists():
        corpus_and_index(preset.settings("corpus"), preset.settings("index"))
        demo_eval(preset, False)
        demo_data(preset)
        demo_sft(preset, False)
    return preset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--search-method", default="hybrid", choices=["bm25", "dense", "hybrid"])
    args = ap.parse_args()

    import os

    os.chdir(ROOT)
    preset = ensure_inputs().with_layer(
        {"grpo": {"max_steps": args.steps, "eval_questions": 0, "name": "bench", "report_to": [],
                  "search": {"search_method": args.search_method}}}, "benchmarks/grpo_step.py")
    from transformers import TrainerCallback

    from agentrl.envs.search.env import LocalSearch
    from agentrl.train import grpo
    from agentrl.train.configs import trl_args
    from agentrl.train.models import load_for_training

    cfg = preset.grpo()
    out = ROOT / "runs" / "bench" / "grpo"
    loaded = load_for_training(cfg.model, adapter=cfg.adapter, seed=cfg.seed,
                               gradient_checkpointing=cfg.gradient_checkpointing)
    loaded.tokenizer.padding_side = "left"
    timers = Timers()
    per_step: list[dict] = []
    LocalSearch.search = timers.wrap_async("tools", LocalSearch.search)  # the search tool's real work
    task = grpo.build_task(cfg, preset.data)
    rows = grpo.training_rows(cfg, task, grpo.train_rows(cfg, preset.heldout, preset.data))
    funcs, weights = grpo.reward_functions(cfg)
    grpo.reward_functions = lambda settings: ([timers.wrap("rewards", f) for f in funcs], weights)

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            timers.clear()
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            per_step.append({**timers, "step": time.perf_counter() - self.t})

    args_trl = trl_args(cfg, grpo.derived_args(cfg, loaded.backend, out))
    trainer = grpo.make_trainer(cfg, args_trl, loaded, task, rows, [StepClock()])
    trainer._generate = timers.wrap("generate", trainer._generate)
    trainer._generate_and_score_completions = timers.wrap("generate_and_score",
                                                           trainer._generate_and_score_completions)
    trainer.train()

    steps = per_step[1:] or per_step
    mean = {k: sum(s.get(k, 0.0) for s in steps) / len(steps) for k in ("step", "generate", "tools", "rewards",
                                                                         "generate_and_score")}
    parts = {
        "generation (model)": mean["generate"] - mean["tools"],
        "tool execution": mean["tools"],
        "reward computation": mean["rewards"],
        "log-probs + advantages": mean["generate_and_score"] - mean["generate"] - mean["rewards"],
        "optimisation (forward/backward/step)": mean["step"] - mean["generate_and_score"],
    }
    hist = [h for h in trainer.state.log_history if "reward" in h]
    calls = sum(h.get("tools/call_frequency", 0.0) for h in hist) / max(1, len(hist))
    rollouts = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    print(f"GRPO step on the tiny model, {args.search_method} search: {rollouts} rollouts "
          f"({rollouts // cfg.num_generations} questions x {cfg.num_generations}), {calls:.2f} tool calls per "
          f"rollout, mean over {len(steps)} steps after warm-up")
    for name, sec in parts.items():
        print(f"  {name:<38} {sec:7.3f} s  {100 * sec / mean['step']:5.1f}%")
    print(f"  {'total step':<38} {mean['step']:7.3f} s")
    share = (parts["tool execution"] + parts["reward computation"]) / mean["step"]
    print(f"tools + rewards = {100 * share:.1f}% of the step")
    out = ROOT / "runs" / "bench" / f"grpo_step_{args.search_method}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"parts": parts, "step": mean["step"], "tools_rewards_share": share,
                               "tool_calls_per_rollout": calls, "per_step": per_step}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
