"""Phase 04: multi-turn GRPO with the environment's tools executed inside the rollouts (TRL environment_factory).

The environment class is the one evaluation uses (SearchEnv, SQLEnv, ...): TRL pools instances, calls
``reset(**row)`` per rollout and exposes the public methods as tools. Tool results are appended to the completion
but masked out of the loss (``tool_mask``), so the model never trains on retrieved text (Search-R1: training on it
hurts stability and accuracy). Rewards are the functions of agentrl.rollout.rewards, weighted from the environment's
table (``[grpo.<env>] rewards``) and logged one by one, with TRL's tool-call frequency, completion length and share
of zero-variance groups. Training rows are the environment's ``train`` split through the preset's held-out gate; the
current policy is evaluated with the agent loop on its ``heldout`` split every ``eval_every`` steps and at the end
(agentrl.train.grpo_eval). Output, under ``runs/grpo/<name>/``: ``adapter/``, ``metrics.json`` (log history,
evaluations), ``eval/step_<n>/`` trajectories, ``manifest.json``, ``log.jsonl``, ``train_items.jsonl`` (what it
trained on).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_json, write_json, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.memory import release_callback
from agentrl.core.tracking import trackers
from agentrl.envs import registry
from agentrl.envs.base import schema_of
from agentrl.rollout.judge import LLMJudge
from agentrl.rollout.rewards import make_judge_reward, reward_registry
from agentrl.rollout.runner import RunConfig
from agentrl.train.checkpoints import gradient_checkpointing, prepare
from agentrl.train.configs import GRPOSettings, record, trl_args, upper_clip
from agentrl.train.grpo_eval import agent_eval, eval_callback, resumed_evals
from agentrl.train.models import (
    bitsandbytes_fallback,
    cuda_available,
    cuda_precision,
    load_for_training,
    prepare_backend,
    progress_bars,
)
from agentrl.train.progress import attach_progress
from agentrl.train.rank_eval import check_launch, main_decides
from agentrl.train.template_check import check_template
from agentrl.train.trainers import close_environments, make_grpo_trainer

log = logging.getLogger(__name__)


def build_task(settings: GRPOSettings, preset: dict | None = None):
    """Return the Task (environment, prompt, scoring) GRPO trains on: the environment built from its table."""
    return registry.build_task(registry.get(settings.env), settings.env_settings, preset or {})


def reward_functions(settings: GRPOSettings) -> tuple[list, list[float]]:
    """Return ``(functions, weights)`` of the run's rewards (names checked when the settings were built)."""
    known = reward_registry()
    funcs = [make_judge_reward(LLMJudge(settings.judge)) if name == "judge" else known[name]
             for name in settings.reward_names()]
    return funcs, [float(w) for w in settings.rewards.values()]


def train_rows(settings: GRPOSettings, heldout: HeldOut, preset: dict | None = None) -> list[dict]:
    """Return the task rows GRPO trains on: the environment's ``train`` split, through the held-out gate, then
    (``items``) only the items a sample run kept."""
    rows = registry.split_rows(registry.get(settings.env), "train", settings.env_settings, preset)
    if not rows:
        raise DataError(f"GRPO has no {settings.env} training items (check [grpo.{settings.env}] train / heldout)")
    rows = heldout.drop(rows, "GRPO training rows")
    return kept_items(rows, settings.items) if settings.items else rows


def kept_items(rows: list[dict], source: str | Path) -> list[dict]:
    """Return the ``rows`` whose id the difficulty filter kept: ``source`` is a sample run directory or its
    ``filtered.json``. No row left is a DataError; ids the rows do not have are logged in one line."""
    p = Path(source)
    path = p / "filtered.json" if p.is_dir() else p
    if not path.is_file():
        raise DataError(f"{path}: no filtered item list (run `agentrl sample` first)")
    kept = {str(i) for i in read_json(path)}
    out = [r for r in rows if str(r["id"]) in kept]
    missing = len(kept - {str(r["id"]) for r in rows})
    if missing:
        log.warning("%s: %d kept item(s) are not among this run's training rows (left out)", path, missing)
    print(f"difficulty filter ({path}): training on {len(out)} of {len(rows)} items")
    if not out:
        raise DataError(f"{path}: none of its {len(kept)} kept items is a training row of this run")
    return out


def heldout_rows(settings: GRPOSettings, preset: dict | None = None) -> list[dict]:
    """Return the held-out rows the run evaluates: the first ``eval_questions`` of the environment's ``heldout``
    split (all of them when None)."""
    rows = registry.split_rows(registry.get(settings.env), "heldout", settings.env_settings, preset)
    return rows if settings.eval_questions is None else rows[:max(0, settings.eval_questions)]


def training_rows(settings: GRPOSettings, task, rows: list[dict]) -> list[dict]:
    """Return the GRPO dataset rows of task ``rows``: ``prompt`` (system + user messages) plus the columns the env and
    rewards read (id, question, golden_answers, ``env``: the row's environment, and ``task``: its metadata as JSON,
    which the environment's reset gets back as ``metadata``; Arrow cannot hold rows whose metadata differ in shape)."""
    return [{"prompt": [{"role": "system", "content": task.system_prompt}, {"role": "user", "content": r["question"]}],
             "id": r["id"], "question": r["question"], "golden_answers": r.get("golden_answers") or [],
             "env": r.get("env") or settings.env, "task": r.get("task") or json.dumps(r.get("metadata") or {})}
            for r in rows]


def derived_args(settings: GRPOSettings, backend: str, out: Path) -> dict:
    """Return the GRPOConfig fields agentrl derives (agentrl.train.configs.DERIVED) for a run on ``backend``: the
    output directory, the machine's precision, the reward weights, vLLM's context, the upper clip as a number,
    gradient checkpointing by the Trainer on the transformers backend only (Unsloth applies its own at load)."""
    return {"output_dir": str(out / "trainer"), "use_cpu": not cuda_available(), **cuda_precision(settings.model),
            "disable_tqdm": not progress_bars(), "reward_weights": reward_functions(settings)[1],
            "vllm_max_model_length": settings.model.max_seq_length, "epsilon_high": upper_clip(settings),
            "gradient_checkpointing": gradient_checkpointing(settings.gradient_checkpointing, backend),
            "report_to": trackers(settings.report_to)}


def make_trainer(settings: GRPOSettings, args, loaded, task, rows: list[dict], callbacks=()):
    """Return agentrl's GRPOTrainer (agentrl.train.trainers) with the task's environment as ``environment_factory``
    and a progress bar and reward chart in place of printed log dicts."""
    from datasets import Dataset

    trainer = make_grpo_trainer(args, model=loaded.model, processing_class=loaded.tokenizer,
                                reward_funcs=reward_functions(settings)[0], train_dataset=Dataset.from_list(rows),
                                environment_factory=task.make_env, callbacks=list(callbacks))
    trainer.live = attach_progress(trainer, f"GRPO {settings.name}", Path(args.output_dir).parent,
                                   shown=("reward", "tools/call_frequency", "completions/mean_length"),
                                   chart=("reward",))
    return trainer


def preflight(settings: GRPOSettings) -> None:
    """Check ``settings`` as TRL will at training start (its GRPOConfig's own checks: batch and group sizes, ...),
    before anything is built or loaded: a DataError naming the table otherwise."""
    backend, _ = prepare_backend(settings.model)
    trl_args(settings, derived_args(settings, backend, Path("runs") / "grpo" / settings.name))


@dataclass
class GRPOResult:
    """What a GRPO run produced."""

    metrics: dict
    model: object
    tokenizer: object
    out: Path
    is_main: bool


def summarize(history: list[dict], reward_names: list[str], labels: list[str] | None = None) -> dict:
    """Return ``{"history": rows}``: per-step reward, each reward function (as ``rewards/<label>``: the preset's
    name of it, ``format`` for TRL's ``format_reward``), tool calls, lengths, zero-std share, each family's reward
    and success."""
    keep = ("reward", "reward_std", "frac_reward_zero_std", "tools/call_frequency", "tools/failure_frequency",
            "completions/mean_length", "completions/clipped_ratio", "loss", "kl", "entropy", "step_time",
            "groups/skipped", "groups/total", "tools/cut_by_length", "prompts/reused", "loss/columns_computed")
    rows = []
    for h in history:
        if "reward" not in h:
            continue
        row = {"step": h["step"], **{k: h[k] for k in keep if k in h}}
        row.update({k: v for k, v in h.items() if k.count("/") == 1 and k.split("/")[1] in ("reward", "success")})
        for name, label in zip(reward_names, labels or reward_names, strict=True):
            if f"rewards/{name}/mean" in h:
                row[f"rewards/{label}"] = h[f"rewards/{name}/mean"]
        rows.append(row)
    return {"history": rows}


def run_grpo(settings: GRPOSettings, heldout: HeldOut, preset: dict | None = None, *, runs: str | Path = "runs",
             eval_run: RunConfig | None = None, resume: bool = False, overwrite: bool = False,
             callbacks=(), source: dict | None = None) -> GRPOResult:
    """Train with GRPO (from the last checkpoint when ``resume``: adapter, optimizer, RNG, trainer state and the agent
    evaluations so far; else an earlier run's checkpoints and evaluations are moved aside, or deleted when
    ``overwrite``), evaluate along the way and at the end (with the ``eval_run`` batch settings), save the adapter;
    return a GRPOResult. ``preset`` is the merged preset's tables (environments' defaults: the corpus); ``source``
    what the manifest says of it. The held-out evaluations run with the environment's evaluation budget
    (``settings.budget``: the preset's ``[eval.<env>]``). TRL's config is built before the model loads (its checks
    stop a bad run first)."""
    settings = bitsandbytes_fallback(settings)
    out = Path(runs) / "grpo" / settings.name
    backend, _ = prepare_backend(settings.model)
    args = trl_args(settings, derived_args(settings, backend, out))
    held_out = heldout_rows(settings, preset)
    check_launch(len(held_out))
    items = train_rows(settings, heldout, preset)  # the held-out gate, before the index or the model loads
    task = build_task(settings, preset)
    rows = training_rows(settings, task, items)
    loaded = load_for_training(settings.model, adapter=settings.adapter, seed=args.seed,
                               gradient_checkpointing=settings.gradient_checkpointing)
    loaded.tokenizer.padding_side = "left"  # generation pads on the left
    main_process = os.environ.get("RANK", "0") == "0"
    checkpoint = (prepare(out / "trainer", resume, overwrite, extra=("evals.json",)) if resume or main_process
                  else None)
    if checkpoint is None and main_process:
        (out / "evals.json").unlink(missing_ok=True)  # an earlier run's: a later --resume must not read it
    evals = resumed_evals(out, checkpoint)
    eval_task = registry.within(task, settings.budget)
    evaluator = eval_callback(settings, eval_task, preset, out, evals, held_out, eval_run)
    trainer = make_trainer(settings, args, loaded, task, rows, [evaluator, release_callback(), *callbacks])
    evaluator.trainer = trainer
    # the template TRL renders with (its replacement, if it made one) must keep every earlier turn's tokens
    tools = next(iter((getattr(trainer, "_env_tools", None) or {None: []}).values()))
    print(check_template(loaded.tokenizer, [t if isinstance(t, dict) else schema_of(t) for t in tools] or None,
                         trainer.chat_template, settings.model.name))
    start = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        close_environments(trainer)  # TRL never closes what environment_factory made (an MCP server, a database)
    seconds = time.perf_counter() - start
    main = trainer.is_world_process_zero()
    names = trainer.reward_func_names
    metrics = {"backend": loaded.backend, "backend_reason": loaded.reason, "train_seconds": round(seconds, 1),
               "steps": trainer.state.global_step, "rewards": dict(settings.rewards), "reward_funcs": names,
               "train_rows": len(rows), "heldout_ids": [r["id"] for r in held_out],
               "eval_budget": registry.budget_of(eval_task),
               "resumed_from": checkpoint.name if checkpoint else None,
               "trl": {k: _plain(getattr(trainer.args, k)) for k in settings.trl},  # as TRL holds them
               "lora_dropout": _lora_dropout(trainer.model),
               **summarize(trainer.state.log_history, names, list(settings.rewards))}
    # every rank takes part in the final evaluation; the main process knows whether the last step had one
    if main_decides(bool(held_out) and not (evals and evals[-1]["step"] == trainer.state.global_step)):
        final = agent_eval(trainer.model, loaded.tokenizer, settings, eval_task, preset, out / "eval",
                           trainer.state.global_step, held_out, trainer, eval_run)
        if final is not None:
            evals.append(final)
            trainer.live.record(final["step"], final)
    if main:
        metrics["evals"] = evals
        trainer.model.save_pretrained(str(out / "adapter"))
        loaded.tokenizer.save_pretrained(str(out / "adapter"))
        _write_run(out, settings, metrics, heldout, items, source)
    return GRPOResult(metrics, trainer.model, loaded.tokenizer, out, main)


def _write_run(out: Path, settings: GRPOSettings, metrics: dict, heldout: HeldOut, items: list[dict],
               source: dict | None) -> None:
    write_json(out / "metrics.json", metrics)
    write_jsonl(out / "train_items.jsonl", [{"id": r["id"], "question": r["question"]} for r in items])
    write_manifest(out, phase="grpo", config=record(settings),
                   counts={"steps": metrics["steps"], "train_rows": metrics["train_rows"],
                           "groups_skipped": sum(h.get("groups/skipped", 0) for h in metrics["history"]),
                           "groups_skipped_per_step": [h.get("groups/skipped") for h in metrics["history"]]},
                   inputs={"model": settings.model.name, "adapter": settings.adapter},
                   extra={"backend": metrics["backend"], "backend_reason": metrics["backend_reason"],
                          "trl": metrics["trl"], "lora_dropout": metrics["lora_dropout"],
                          "heldout": heldout.describe(), "preset": source or {}})


def _plain(value):
    """Return a TRL config value as JSON can hold it (an enum as its value)."""
    value = getattr(value, "value", value)
    return value if isinstance(value, str | int | float | bool | list | dict | None) else str(value)


def _lora_dropout(model) -> list[float]:
    """Return the LoRA dropout(s) the trained model ran with (from its adapter config)."""
    return sorted({float(c.lora_dropout) for c in (getattr(model, "peft_config", None) or {}).values()})
