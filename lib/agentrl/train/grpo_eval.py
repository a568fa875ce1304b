"""GRPO's held-out evaluation: the current policy run with the agent loop on the environment's held-out rows, every
``eval_every`` steps (a TrainerCallback) and at the end, on every rank of a distributed run (agentrl.train.rank_eval).
Each evaluation is written under ``runs/grpo/<name>/eval/step_<n>/`` and kept in ``evals.json`` (a resumed run reads
the ones up to its checkpoint back)."""

from __future__ import annotations

from pathlib import Path

from agentrl.core.io import read_json, write_json
from agentrl.rollout.evaluate import EvalConfig, run_eval
from agentrl.rollout.local import LocalConfig, LocalPolicy
from agentrl.rollout.runner import RunConfig
from agentrl.train.rank_eval import evaluate_on_every_rank

HEADLINE = ("f1", "em", "acc", "judge", "exec", "overlap", "score")  # overlap: SQL partial credit; score: the text game


def agent_eval(model, tokenizer, settings, task, preset: dict | None, out: Path, step: int, rows: list[dict],
               trainer=None, run: RunConfig | None = None) -> dict | None:
    """Run the agent loop with the current policy on the held-out ``rows`` (the environment and its settings as GRPO
    trains it, the batch settings ``run``); return its headline metrics. In a distributed run every rank must call
    it: each evaluates its share and the main process returns the metrics of all rows, the others None."""
    cfg = EvalConfig(name=f"{settings.name}_heldout", env=settings.env, policy="local", run=run or RunConfig(),
                     envs={settings.env: settings.env_settings})

    def one(share: list[dict], out_dir: Path, generator) -> dict:
        policy = LocalPolicy(LocalConfig(model=str(settings.model.name), max_new_tokens=task.max_new_tokens),
                             model=generator, tokenizer=tokenizer)  # the environment's evaluation budget
        policy.model = f"grpo:{settings.name}@{step}"
        return run_eval(cfg, preset, overwrite=True, policy=policy, task=task, out_dir=out_dir, rows=share)

    was_training = model.training
    model.eval()
    try:
        m = evaluate_on_every_rank(one, rows, out / f"step_{step}", model, trainer)
    finally:
        if was_training:
            model.train()
    if m is None:
        return None
    return {"step": step, "n": m["n"], **{k: m["overall"][k] for k in HEADLINE if k in m["overall"]}, **m["tools"]}


def eval_callback(settings, task, preset: dict | None, out: Path, results: list, rows: list[dict],
                  run: RunConfig | None = None):
    """Return a TrainerCallback that evaluates the policy on ``rows`` every ``settings.eval_every`` steps, on every
    rank (:func:`agent_eval`), and writes the evaluations so far to ``out/evals.json``. Set its ``trainer`` to the
    trainer it is given to (DeepSpeed gathers parameters through it)."""
    from transformers import TrainerCallback

    class AgentEval(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if settings.eval_every and rows and state.global_step % settings.eval_every == 0:
                m = agent_eval(model, processing_class, settings, task, preset, out / "eval", state.global_step,
                               rows, self.trainer, run)
                if m is not None:
                    results.append(m)
                    write_json(out / "evals.json", results)
                    if getattr(self.trainer, "live", None) is not None:  # JSONL, live chart, TensorBoard
                        self.trainer.live.record(state.global_step, m)

    return AgentEval()


def resumed_evals(out: Path, checkpoint: Path | None) -> list[dict]:
    """Return the agent evaluations a resumed run keeps: those in ``out/evals.json`` up to the checkpoint's step
    (later ones are redone from the checkpoint); none for a fresh run."""
    path = out / "evals.json"
    if checkpoint is None or not path.is_file():
        return []
    step = int(checkpoint.name.rsplit("-", 1)[1])
    return [e for e in read_json(path) if e["step"] <= step]
