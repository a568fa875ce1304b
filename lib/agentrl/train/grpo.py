"""Phase 04: multi-turn GRPO with the environment's tools executed inside the rollouts (TRL environment_factory).

The environment class is the one evaluation uses (SearchEnv, SQLEnv): TRL pools instances, calls
``reset(**row)`` per rollout and exposes the public methods as tools. Tool results are appended to the
completion but masked out of the loss (``tool_mask``), so the model never trains on retrieved text
(Search-R1: training on it hurts stability and accuracy). Rewards are the functions of agentrl.rollout.rewards,
weighted from the config and logged one by one, with TRL's tool-call frequency, completion length and
share of zero-variance groups. The current policy is evaluated with the agent loop on held-out questions
every ``eval_every`` steps and at the end. Output, under ``runs/grpo/<name>/``: ``adapter/``,
``metrics.json`` (log history, evaluations), ``eval/step_<n>/`` trajectories, ``manifest.json``, ``log.jsonl``
(every logged step and the held-out evaluations as ``heldout/<metric>``, also TensorBoard scalars).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError
from agentrl.envs import registry
from agentrl.envs.task import EPISODE_KEYS, EpisodeSettings
from agentrl.rollout.judge import JudgeConfig
from agentrl.train.models import ModelConfig
from agentrl.train.trl_args import grpo_fields

log = logging.getLogger(__name__)


@dataclass
class GRPOSettings(EpisodeSettings):
    """The ``[grpo]`` table of a preset: the episode settings (EpisodeSettings; a key this table does not set takes
    ``[eval]``'s) and the training run's."""

    name: str = "grpo"
    env: str = registry.DEFAULT  # a registered environment (mixed: rows drawn by ``mixture``) or a user's env file
    mixture: dict[str, float] = field(default_factory=dict)  # mixed: family -> proportion, e.g. {math = 0.5, ...}
    mixture_rows: int = 32  # mixed: training rows drawn in those proportions (plus eval_questions held out)
    qa: str | None = None  # default: the eval QA set (search); for sql use "synthetic" (DB Bench is eval-only)
    train_offset: int = 0
    train_questions: int | None = None
    items: str | None = None  # a sample run (or its filtered.json): train only on the items it kept (difficulty filter)
    skip_equal_groups: bool = True  # groups whose rewards are all equal carry no loss (agentrl.train.group_filter)
    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: str | None = None  # start from this LoRA adapter (e.g. the SFT one); None = fresh LoRA on the base
    rewards: dict[str, float] = field(default_factory=dict)  # empty: the env's declared defaults (its README)
    judge: JudgeConfig | None = None
    num_generations: int = 8
    max_completion_length: int = 1024  # tool results count against it
    max_tool_calling_iterations: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    # The loss and optimiser, passed explicitly so both backends train the same: Unsloth's patched GRPOConfig
    # changes defaults that stock TRL keeps (for an explicit loss_type="dapo" it turns epsilon_high=None into
    # 0.28 and mask_truncated_completions=None into True, where TRL 1.14.2's trainer uses epsilon and False; it
    # defaults optim to adamw_8bit, weight_decay to 0.001, warmup to 0.1 and vllm_importance_sampling_correction
    # to False). Defaults here are stock TRL's (but the importance-sampling correction), and grpo_config resolves
    # epsilon_high to a number, so no None reaches either trainer; the GPU presets spell out DAPO's values.
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    epsilon: float = 0.2  # lower clip range
    epsilon_high: float | None = None  # upper clip range; None = epsilon (cispo: 5.0), resolved by grpo_config
    mask_truncated_completions: bool = False  # DAPO: True, completions cut at max_completion_length carry no loss
    vllm_importance_sampling_correction: bool = False  # off as in Unsloth (TRL's own default is on)
    optim: str = "adamw_torch"  # GPU presets: adamw_8bit (bitsandbytes, CUDA only)
    weight_decay: float = 0.0
    warmup: float = 0.0  # a fraction of the steps (< 1) or a number of steps
    max_grad_norm: float = 1.0
    learning_rate: float = 1e-6
    lr_scheduler: str = "constant"
    max_steps: int = 200
    batch_size: int = 8  # completions per device per step; a multiple of num_generations
    grad_accum: int = 1
    eval_every: int = 0  # steps between agent evaluations (0 = only at the end)
    eval_questions: int = 20
    eval_offset: int | None = None  # default: after the training slice, else the last eval_questions rows
    eval_max_new_tokens: int = 256
    use_vllm: bool = False  # TRL's vLLM generation (Unsloth: set model.fast_inference instead)
    vllm_mode: str = "colocate"  # colocate | server (`trl vllm-serve` on other GPUs)
    vllm_gpu_memory_utilization: float = 0.3
    vllm_tensor_parallel_size: int = 1  # colocate: GPUs one vLLM engine spans (its weights split across them)
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    log_completions: bool = True
    logging_steps: int = 1
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    seed: int = 42
    save_steps: int = 0  # a checkpoint (adapter, optimizer, RNG, trainer state) every N steps; 0 = none
    save_total_limit: int = 2
    # any other GRPOConfig field, passed through (agentrl.train.trl_args), e.g. GSPO's
    # importance_sampling_level = "sequence"
    trl: dict[str, Any] = field(default_factory=dict, metadata={"keys": grpo_fields})

    def __post_init__(self):
        spec = registry.get(self.env)
        self.env = spec.name
        if not self.rewards:
            self.rewards = dict(spec.rewards)


# the [grpo] fields that belong to its env: `--env` naming another env drops them (its [grpo_<env>] table or the
# env's defaults apply instead), so search's answer_f1 or QA file never reach a text game
ENV_FIELDS = ("rewards", "qa", "train_offset", "train_questions", "eval_offset", "mixture", "mixture_rows")


def env_table(preset: dict, env: str | None = None) -> dict:
    """Return the ``[grpo]`` table for ``env`` (default: its own): for another env than ``[grpo].env``, without
    ENV_FIELDS and named ``<name>_<env>``; then the preset's ``[grpo_<env>]`` fields replace its fields; episode
    keys (EpisodeSettings) neither sets come from ``[eval]``."""
    raw = dict(preset.get("grpo") or {})
    own = raw.get("env", registry.DEFAULT)
    env = env or own
    if env != own:
        for key in ENV_FIELDS:
            raw.pop(key, None)
        raw["env"] = env
        raw["name"] = f"{raw.get('name', 'grpo')}_{env}"
    raw.update(preset.get(f"grpo_{env}") or {})
    evaluated = preset.get("eval") or {}
    return {**{k: evaluated[k] for k in EPISODE_KEYS if k in evaluated}, **raw}


def grpo_config(preset: dict | None = None, **overrides) -> GRPOSettings:
    """Return the preset's ``[grpo]`` settings for ``env`` (see :func:`env_table`) with non-None overrides
    (any GRPOSettings field, and ``model_name``/``backend``), ``epsilon_high`` resolved to the number both trainers
    use (:func:`upper_clip`). An unknown override, a ``[grpo.trl]`` field TRL lacks or agentrl sets itself, and
    a LoRA shape (``[grpo.model.lora]`` r, alpha, target_modules, use_rslora) next to an ``adapter`` whose shape is
    fixed are DataErrors."""
    from dataclasses import replace

    from agentrl.core.config import from_dict
    from agentrl.train.trl_args import check_trl_table

    table = env_table(preset or {}, overrides.pop("env", None))
    cfg = from_dict(GRPOSettings, table, "grpo")
    o = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(o) - set(GRPOSettings.__dataclass_fields__) - {"model_name", "backend"})
    if unknown:
        raise DataError(f"grpo_config: unknown setting '{unknown[0]}' (GRPOSettings fields, model_name, backend)")
    if "model_name" in o:
        cfg.model = replace(cfg.model, name=o.pop("model_name"))
    if "backend" in o:
        cfg.model = replace(cfg.model, backend=o.pop("backend"))
    cfg = replace(cfg, **o)
    cfg.adapter = cfg.adapter or None  # "" (e.g. --set grpo.adapter='""'): a fresh LoRA on the base model
    cfg.epsilon_high = upper_clip(cfg)
    check_trl_table(cfg.trl, "grpo")
    shape = sorted(set((table.get("model") or {}).get("lora") or {}) - {"dropout"})
    if cfg.adapter and shape:
        raise DataError(f"grpo.model.lora.{shape[0]}: GRPO continues from the adapter {cfg.adapter}, whose shape "
                        "(r, alpha, target_modules, use_rslora) is fixed; remove it from [grpo.model.lora] (only "
                        "dropout applies on top of an adapter), or set grpo.adapter = \"\" for a fresh LoRA")
    return cfg


def upper_clip(settings: GRPOSettings) -> float:
    """Return the upper clip range the run trains with: ``epsilon_high`` when set, else what stock TRL 1.14.2's
    trainer uses for None (``epsilon``), or for ``loss_type = "cispo"`` 5.0 (its cap is epsilon_high itself, not
    1 + epsilon_high: Unsloth 2026.10.9 resolves None to 5.0 there, TRL would cap every weight at 0.2). Passed
    as a number, it is what both TRL and Unsloth's patched config use (Unsloth replaces only a None)."""
    if settings.epsilon_high is not None:
        return float(settings.epsilon_high)
    return 5.0 if settings.loss_type == "cispo" else float(settings.epsilon)


def with_eval_defaults(settings: GRPOSettings, preset: dict) -> GRPOSettings:
    """Return ``settings`` with each episode key it leaves unset (None: the index, the MCP URL, ...) taken from the
    preset's ``[eval]`` table, as :func:`grpo_config` does for the keys ``[grpo]`` does not name."""
    from dataclasses import replace

    evaluated = (preset or {}).get("eval") or {}
    fills = {k: evaluated[k] for k in EPISODE_KEYS if getattr(settings, k) is None and evaluated.get(k) is not None}
    return replace(settings, **fills) if fills else settings


def build_task(settings: GRPOSettings, preset: dict):
    """Return the Task (environment, prompt, scoring) GRPO trains on: the registered environment built from the
    run's episode settings (:func:`with_eval_defaults`), as evaluation builds it."""
    return registry.get(settings.env).build(with_eval_defaults(settings, preset), preset)


def reward_functions(settings: GRPOSettings) -> tuple[list, list[float], object]:
    """Return ``(functions, weights, judge)`` for the configured rewards (judge None unless configured). A reward
    that cannot score the run's env (``game_score`` on math, ``answer_f1`` on a text game) is a DataError."""
    from agentrl.rollout.rewards import make_judge_reward, reward_misfit, reward_registry

    funcs, weights, judge = [], [], None
    rewards = reward_registry()
    families = settings.mixture if registry.get(settings.env).routes else [settings.env]
    for name, weight in settings.rewards.items():
        misfit = reward_misfit(name, families)
        if misfit:
            raise DataError(f"grpo.rewards: {name} cannot train env {settings.env!r} "
                            f"({', '.join(families)}): {misfit}")
        if name == "judge":
            if settings.judge is None:
                raise DataError("grpo.rewards has 'judge' but no [grpo.judge] table (model, base_url)")
            from agentrl.rollout.judge import LLMJudge

            judge = LLMJudge(settings.judge)
            funcs.append(make_judge_reward(judge))
        elif name in rewards:
            funcs.append(rewards[name])
        else:
            raise DataError(f"grpo.rewards: unknown reward '{name}' (choose from {', '.join([*rewards, 'judge'])})")
        weights.append(float(weight))
    if not funcs:
        raise DataError("grpo.rewards is empty")
    return funcs, weights, judge


def split_rows(settings: GRPOSettings, preset: dict) -> tuple[list[dict], list[dict]]:
    """Return ``(train, held_out)`` task rows, never the same item on both sides.

    An environment whose training and held-out items are separate pools (the text game, math, code: ``pooled``)
    without ``qa``, and a mixture: :func:`pooled_rows`. Otherwise the rows of ``qa`` (default the environment's
    training rows: the QA file, the synthetic SQL tables; DB Bench is refused) are split: held out are
    ``eval_questions`` rows from ``eval_offset``, by default those right after the training slice, or, when
    training takes every question (or the slice runs to the end), the last ``eval_questions`` rows, which are then
    removed from training. Evaluating on training questions would measure memorisation.
    """
    from agentrl.core.metrics import same_item_key

    spec = registry.get(settings.env)
    if spec.routes or (spec.pooled and settings.qa is None):
        return pooled_rows(settings, preset)
    end = None if settings.train_questions is None else settings.train_offset + settings.train_questions
    n_eval = max(0, settings.eval_questions)
    rows = spec.rows("train", settings.qa, (end or registry.GENERATED_ROWS) + n_eval, preset)
    end = len(rows) if end is None else end
    start = settings.eval_offset
    if start is None:
        start = end if end + n_eval <= len(rows) else max(0, len(rows) - n_eval)
    held = rows[start:start + n_eval]
    held_keys = {same_item_key(r) for r in held}
    train = [r for r in rows[settings.train_offset:end] if same_item_key(r) not in held_keys]
    if not train:
        raise DataError("GRPO has no training questions (check grpo.qa / train_offset / train_questions / "
                        "eval_questions)")
    if n_eval and len(held) < n_eval:
        log.warning("GRPO held-out evaluation has %d of %d questions", len(held), n_eval)
    return train, held


def preset_heldout_rows(preset: dict) -> list[dict]:
    """Return the task rows ``preset`` holds out, which no training path may use (agentrl.train.heldout): each GRPO
    table's evaluation rows, the demo's held-out questions and every row of ``[eval] heldout_qa``."""
    rows: list[dict] = []
    if "grpo" in preset:
        envs = dict.fromkeys([grpo_config(preset).env, *(k[5:] for k in preset if k.startswith("grpo_"))])
        for env in envs:
            settings = grpo_config(preset, env=env)
            rows += split_rows(settings, preset)[1]
    demo = preset.get("demo") or {}
    if demo.get("heldout_questions") and "eval" in preset:
        from agentrl.rollout.evaluate import eval_config, load_rows

        cfg = eval_config(preset, offset=int(demo.get("train_questions", 0)), limit=int(demo["heldout_questions"]))
        rows += load_rows(cfg, preset)
    heldout_qa = (preset.get("eval") or {}).get("heldout_qa")
    if heldout_qa:
        from agentrl.data.corpus import load_qa

        rows += load_qa(heldout_qa)
    return rows


def without_heldout(rows: list[dict], preset: dict) -> list[dict]:
    """Return the training ``rows`` without the preset's held-out items (:func:`preset_heldout_rows`), printing
    one line with the count when any is dropped; a DataError when none is left."""
    from agentrl.core.metrics import drop_heldout, same_item_key

    kept = drop_heldout(rows, {same_item_key(r) for r in preset_heldout_rows(preset)}, "GRPO training rows")
    if not kept:
        raise DataError("GRPO has no training rows left: every one is a held-out item of the preset")
    return kept


def pooled_rows(settings: GRPOSettings, preset: dict) -> tuple[list[dict], list[dict]]:
    """Return ``(train, held_out)`` for a mixture or a pooled environment without ``qa``: training rows from the
    environment's (each family's) ``train`` rows, held-out rows from its ``heldout`` rows (train-fold games vs
    dev-fold games, GSM8K's training problems vs the held-out slice, HumanEval/0..99 vs the rest, ...): never the
    same item on both sides."""
    from agentrl.envs.mixed.env import family_rows, mixture_rows

    n_eval = max(0, settings.eval_questions)
    start = settings.eval_offset or 0
    if registry.get(settings.env).routes:
        if not settings.mixture:
            raise DataError(f"grpo.env = '{settings.env}' needs grpo.mixture, e.g. "
                            "{math = 0.5, code = 0.25, textgame = 0.25}")
        try:
            train = mixture_rows(settings.mixture, family_rows(settings.mixture, "train", settings.mixture_rows,
                                                               preset), settings.mixture_rows, settings.seed)
            held = mixture_rows(settings.mixture, family_rows(settings.mixture, "heldout", n_eval, preset), n_eval,
                                settings.seed) if n_eval else []
        except ValueError as exc:
            raise DataError(f"grpo.mixture: {exc}") from None
        return train, held
    end = None if settings.train_questions is None else settings.train_offset + settings.train_questions
    spec = registry.get(settings.env)
    train = spec.rows("train", None, end or registry.GENERATED_ROWS, preset)[settings.train_offset:end]
    held = spec.rows("heldout", None, start + n_eval, preset)[start:start + n_eval]
    if not train:
        raise DataError(f"GRPO has no {settings.env} training items (check grpo.train_offset / train_questions)")
    return train, held


def training_rows(settings: GRPOSettings, task, preset: dict, rows: list[dict] | None = None) -> list[dict]:
    """Return the GRPO dataset rows: ``prompt`` (system + user messages) plus the columns the env and rewards
    read (id, question, golden_answers, ``env``: the row's environment, and ``task``: its metadata as JSON, which
    the environment's reset gets back as ``metadata``). ``rows`` defaults to the training half
    of :func:`split_rows`."""
    import json

    if rows is None:
        rows = split_rows(settings, preset)[0]
    spec = registry.get(settings.env)
    out = []
    for r in rows:
        prompt = [{"role": "system", "content": task.system_prompt}, {"role": "user", "content": r["question"]}]
        row = {"prompt": prompt, "id": r["id"], "question": r["question"],
               "golden_answers": r.get("golden_answers") or [], "env": r.get("env") or settings.env}
        if spec.row_metadata or spec.routes:  # the env rebuilds its database / game / problem from the row
            row["task"] = r.get("task") or json.dumps(r["metadata"])
        out.append(row)
    return out


def training_args(settings: GRPOSettings, reward_weights: list[float], out: Path, backend: str | None = None):
    """Return the GRPOConfig of a run on ``backend`` (default: what choose_backend picks for the settings): the
    fields of :func:`trainer_kwargs` and the ``[grpo.trl]`` table's (agentrl.train.trl_args)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig

    from agentrl.train.trl_args import with_trl

    return GRPOConfig(**with_trl(trainer_kwargs(settings, reward_weights, out, backend), settings.trl, "grpo"))


def trainer_kwargs(settings: GRPOSettings, reward_weights: list[float], out: Path, backend: str | None = None) -> dict:
    """Return the GRPOConfig fields agentrl sets for a run on ``backend``: every
    loss and optimiser setting explicit (see GRPOSettings), checkpoints every ``save_steps``, gradient
    checkpointing by the Trainer on the transformers backend only (checkpoints.gradient_checkpointing)."""
    from agentrl.core.tracking import trackers
    from agentrl.train.checkpoints import gradient_checkpointing, save_args
    from agentrl.train.models import choose_backend, cuda_available, cuda_precision, progress_bars

    use_cpu = not cuda_available()
    backend = backend or choose_backend(settings.model.backend)[0]
    if settings.batch_size * settings.grad_accum % settings.num_generations:
        raise DataError(f"grpo.batch_size x grad_accum ({settings.batch_size * settings.grad_accum}) must be a "
                        f"multiple of num_generations ({settings.num_generations})")
    return dict(
        output_dir=str(out / "trainer"), max_steps=settings.max_steps, learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler, warmup_steps=settings.warmup, optim=settings.optim,
        weight_decay=settings.weight_decay, max_grad_norm=settings.max_grad_norm,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum, num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        max_tool_calling_iterations=settings.max_tool_calling_iterations, temperature=settings.temperature,
        top_p=settings.top_p, beta=settings.beta, loss_type=settings.loss_type, scale_rewards=settings.scale_rewards,
        epsilon=settings.epsilon, epsilon_high=upper_clip(settings),
        mask_truncated_completions=bool(settings.mask_truncated_completions),
        vllm_importance_sampling_correction=settings.vllm_importance_sampling_correction,
        reward_weights=reward_weights, log_completions=settings.log_completions, num_completions_to_print=2,
        logging_steps=settings.logging_steps, report_to=trackers(settings.report_to), seed=settings.seed,
        use_cpu=use_cpu, **cuda_precision(settings.model),
        gradient_checkpointing=gradient_checkpointing(settings.model.gradient_checkpointing, backend),
        use_vllm=settings.use_vllm, vllm_mode=settings.vllm_mode,
        vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=settings.vllm_tensor_parallel_size, vllm_server_host=settings.vllm_server_host,
        vllm_server_port=settings.vllm_server_port, vllm_max_model_length=settings.model.max_seq_length,
        disable_tqdm=not progress_bars(), **save_args(settings.save_steps, settings.save_total_limit),
    )


def make_trainer(settings: GRPOSettings, loaded, task, rows: list[dict], out: Path, callbacks=()):
    """Return TRL's GRPOTrainer with the task's environment as ``environment_factory``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOTrainer

    funcs, weights, _ = reward_functions(settings)
    args = training_args(settings, weights, out, loaded.backend)
    from agentrl.train.length_budget import budget_trainer
    from agentrl.train.progress import attach_progress

    trainer_cls = budget_trainer(family_trainer(GRPOTrainer) if registry.get(settings.env).routes else GRPOTrainer)
    if settings.skip_equal_groups:
        from agentrl.train.group_filter import skipping_trainer

        trainer_cls = skipping_trainer(trainer_cls)
    trainer = trainer_cls(model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=funcs, args=args,
                          train_dataset=Dataset.from_list(rows), environment_factory=task.make_env,
                          callbacks=list(callbacks))
    # a progress bar and reward chart instead of printed log dicts; held-out evaluations through its record()
    trainer.live = attach_progress(trainer, f"GRPO {settings.name}", out,
                                   shown=("reward", "tools/call_frequency", "completions/mean_length"),
                                   chart=("reward",))
    return trainer


def family_trainer(base):
    """Return a subclass of TRL's GRPOTrainer ``base`` that logs, for each task family of a mixed run, the mean
    weighted total reward of that family's rollouts (``<family>/reward``: what the advantages are computed from)
    and their headline success (``<family>/success``: game solved, math-verify match, tests passed, ...)."""
    import torch

    from agentrl.envs.mixed.env import family_summary
    from agentrl.rollout.rewards import episode_metrics

    class FamilyGRPOTrainer(base):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            start = self.accelerator.process_index * len(prompts)  # gathered over processes: take ours
            local = per_func[start:start + len(prompts)]
            total = (local * self.reward_weights.to(local.device).unsqueeze(0)).nansum(dim=1)
            total[torch.isnan(local).all(dim=1)] = torch.nan  # no reward scored it: TRL leaves it out too
            envs = self.environments or [None] * len(inputs)
            success = []
            for c, e, x in zip(completions, envs, inputs, strict=True):
                family, metrics = episode_metrics(c, e, x.get("golden_answers"), x.get("env"))
                success.append(None if metrics is None else metrics.get(registry.get(family).success))
            for key, value in family_summary([x.get("env") for x in inputs], total.tolist(), success).items():
                self._log_metric(key, value)
            return per_func

    return FamilyGRPOTrainer


def _main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def agent_eval(model, tokenizer, settings: GRPOSettings, task, preset: dict, out: Path, step: int,
               rows: list[dict], trainer=None) -> dict | None:
    """Run the agent loop with the current policy on the held-out ``rows``; return its headline metrics. In a
    distributed run every rank must call it: each evaluates its share (agentrl.train.rank_eval) and the main process
    returns the metrics of all rows, the others None."""
    from agentrl.rollout.evaluate import eval_config, run_eval
    from agentrl.rollout.local import LocalConfig, LocalPolicy
    from agentrl.train.rank_eval import evaluate_on_every_rank

    cfg = eval_config(preset, env=settings.env, policy="local", **{k: getattr(settings, k) for k in EPISODE_KEYS})
    families = settings.mixture if registry.get(settings.env).routes else [settings.env]
    cfg.run.max_turns = max(cfg.run.max_turns, *(registry.get(f).min_turns for f in families))

    def run(share: list[dict], out_dir: Path, generator) -> dict:
        policy = LocalPolicy(LocalConfig(model=settings.model.name, max_new_tokens=settings.eval_max_new_tokens),
                             model=generator, tokenizer=tokenizer)
        policy.model = f"grpo:{settings.name}@{step}"
        return run_eval(cfg, preset, overwrite=True, policy=policy, task=task, out_dir=out_dir, rows=share)

    was_training = model.training
    model.eval()
    try:
        m = evaluate_on_every_rank(run, rows, out / f"step_{step}", model, trainer)
    finally:
        if was_training:
            model.train()
    if m is None:
        return None
    keys = ("f1", "em", "acc", "judge", "exec")
    return {"step": step, "n": m["n"], **{k: m["overall"][k] for k in keys if k in m["overall"]}, **m["tools"]}


def eval_callback(settings: GRPOSettings, task, preset: dict, out: Path, results: list, rows: list[dict]):
    """Return a TrainerCallback that evaluates the policy on ``rows`` every ``settings.eval_every`` steps, on every
    rank (agent_eval), and writes the evaluations so far to ``out/evals.json`` (a resumed run reads them back). Set
    its ``trainer`` to the trainer it is given to (DeepSpeed gathers parameters through it)."""
    from transformers import TrainerCallback

    from agentrl.core.io import write_json

    class AgentEval(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if settings.eval_every and rows and state.global_step % settings.eval_every == 0:
                m = agent_eval(model, processing_class, settings, task, preset, out / "eval", state.global_step,
                               rows, self.trainer)
                if m is not None:
                    results.append(m)
                    write_json(out / "evals.json", results)
                    if getattr(self.trainer, "live", None) is not None:  # JSONL, live chart, TensorBoard
                        self.trainer.live.record(state.global_step, m)

    return AgentEval()


def resumed_evals(out: Path, checkpoint: Path | None) -> list[dict]:
    """Return the agent evaluations a resumed run keeps: those in ``out/evals.json`` up to the checkpoint's step
    (later ones are redone from the checkpoint); none for a fresh run."""
    from agentrl.core.io import read_json

    path = out / "evals.json"
    if checkpoint is None or not path.is_file():
        return []
    step = int(checkpoint.name.rsplit("-", 1)[1])
    return [e for e in read_json(path) if e["step"] <= step]


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
    name of it, ``format`` for TRL's ``format_reward``), tool calls, lengths, zero-std share."""
    keep = ("reward", "reward_std", "frac_reward_zero_std", "tools/call_frequency", "tools/failure_frequency",
            "completions/mean_length", "completions/clipped_ratio", "loss", "kl", "entropy", "step_time",
            "groups/skipped", "groups/total", "tools/cut_by_length")
    rows = []
    for h in history:
        if "reward" not in h:
            continue
        row = {"step": h["step"], **{k: h[k] for k in keep if k in h}}
        # mixed-task runs: each family's reward and success (agentrl.envs.mixed.env logs them)
        row.update({k: v for k, v in h.items() if k.count("/") == 1 and k.split("/")[1] in ("reward", "success")})
        for name, label in zip(reward_names, labels or reward_names, strict=True):
            if f"rewards/{name}/mean" in h:
                row[f"rewards/{label}"] = h[f"rewards/{name}/mean"]
        rows.append(row)
    return {"history": rows}


def run_grpo(settings: GRPOSettings, preset: dict | None = None, *, runs: str | Path = "runs", resume: bool = False,
             overwrite: bool = False, callbacks=()) -> GRPOResult:
    """Train with GRPO (from the last checkpoint when ``resume``: adapter, optimizer, RNG, trainer state and
    the agent evaluations so far; else an earlier run's checkpoints and evaluations are moved aside, or deleted
    when ``overwrite``), evaluate along the way and at the end, save the adapter; return a GRPOResult."""
    from agentrl.train.checkpoints import prepare
    from agentrl.train.models import bitsandbytes_fallback, load_for_training
    from agentrl.train.rank_eval import check_launch, main_decides

    preset = preset or {}
    settings = bitsandbytes_fallback(settings)
    check_launch(settings.eval_questions)
    out = Path(runs) / "grpo" / settings.name
    loaded = load_for_training(settings.model, adapter=settings.adapter, seed=settings.seed)
    loaded.tokenizer.padding_side = "left"  # generation pads on the left
    task = build_task(settings, preset)
    train_rows, held_out = split_rows(settings, preset)
    train_rows = without_heldout(train_rows, preset)
    if settings.items:
        from agentrl.train.group_filter import kept_items

        train_rows = kept_items(train_rows, settings.items)
    rows = training_rows(settings, task, preset, train_rows)
    checkpoint = (prepare(out / "trainer", resume, overwrite, extra=("evals.json",)) if resume or _main_process()
                  else None)
    if checkpoint is None and _main_process():
        (out / "evals.json").unlink(missing_ok=True)  # an earlier run's: a later --resume must not read it
    evals = resumed_evals(out, checkpoint)
    evaluator = eval_callback(settings, task, preset, out, evals, held_out)
    trainer = make_trainer(settings, loaded, task, rows, out, [evaluator, *callbacks])
    evaluator.trainer = trainer
    trl_applied = {k: _plain(getattr(trainer.args, k)) for k in settings.trl}  # as TRL holds them
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    seconds = time.perf_counter() - start
    main = trainer.is_world_process_zero()
    names = trainer.reward_func_names
    metrics = {"backend": loaded.backend, "backend_reason": loaded.reason, "train_seconds": round(seconds, 1),
               "steps": trainer.state.global_step, "rewards": dict(settings.rewards), "reward_funcs": names,
               "train_rows": len(rows), "heldout_ids": [r["id"] for r in held_out],
               "resumed_from": checkpoint.name if checkpoint else None, "trl": trl_applied,
               "lora_dropout": _lora_dropout(trainer.model),
               **summarize(trainer.state.log_history, names, list(settings.rewards))}
    # every rank takes part in the final evaluation; the main process knows whether the last step had one
    if main_decides(bool(held_out) and not (evals and evals[-1]["step"] == trainer.state.global_step)):
        final = agent_eval(trainer.model, loaded.tokenizer, settings, task, preset, out / "eval",
                           trainer.state.global_step, held_out, trainer)
        if final is not None:
            evals.append(final)
            trainer.live.record(final["step"], final)
    if main:
        metrics["evals"] = evals
        trainer.model.save_pretrained(str(out / "adapter"))
        loaded.tokenizer.save_pretrained(str(out / "adapter"))
        _write_run(out, settings, metrics)
    return GRPOResult(metrics, trainer.model, loaded.tokenizer, out, main)


def _write_run(out: Path, settings: GRPOSettings, metrics: dict) -> None:
    from agentrl.core.config import to_dict
    from agentrl.core.io import write_json
    from agentrl.core.manifest import write_manifest

    write_json(out / "metrics.json", metrics)
    write_manifest(out, phase="grpo", config=to_dict(settings),
                   counts={"steps": metrics["steps"], "train_rows": metrics["train_rows"],
                           "groups_skipped": sum(h.get("groups/skipped", 0) for h in metrics["history"]),
                           "groups_skipped_per_step": [h.get("groups/skipped") for h in metrics["history"]]},
                   inputs={"model": settings.model.name, "adapter": settings.adapter},
                   extra={"backend": metrics["backend"], "backend_reason": metrics["backend_reason"],
                          "trl": metrics["trl"], "lora_dropout": metrics["lora_dropout"]})


def _plain(value):
    """Return a TRL config value as JSON can hold it (an enum as its value)."""
    value = getattr(value, "value", value)
    return value if isinstance(value, str | int | float | bool | list | dict | None) else str(value)


def _lora_dropout(model) -> list[float]:
    """Return the LoRA dropout(s) the trained model ran with (from its adapter config)."""
    return sorted({float(c.lora_dropout) for c in (getattr(model, "peft_config", None) or {}).values()})


def print_grpo_summary(metrics: dict, out: Path) -> None:
    """Print the reward trajectory and the held-out evaluations of a GRPO run."""
    steps = metrics.get("history") or []
    print(f"{out}: {metrics['steps']} steps on "
          f"{metrics['backend']} ({metrics['backend_reason']}), {metrics['train_seconds']} s; rewards "
          f"{metrics['rewards']}")
    if steps:
        q = max(1, len(steps) // 4)
        first = sum(s["reward"] for s in steps[:q]) / q
        last = sum(s["reward"] for s in steps[-q:]) / q
        print(f"mean reward: first {q} steps {first:.3f} -> last {q} steps {last:.3f}")
    for e in metrics.get("evals") or []:
        print(f"eval @ step {e['step']}: f1 {e.get('f1', 0):.3f}, well-formed tool-call episodes "
              f"{e['episodes_with_wellformed_call']:.2f}, tool calls/episode {e['mean_calls']:.2f}")


def reward_chart(metrics: dict):
    """Return an altair chart of the mean reward (and each reward function) over steps, with agent-eval F1."""
    import altair as alt
    import polars as pl

    rows = []
    for r in metrics.get("history", []):
        rows += [{"step": r["step"], "series": k, "value": v} for k, v in r.items()
                 if k == "reward" or k.startswith("rewards/")]
    rows += [{"step": e["step"], "series": "eval f1", "value": e.get("f1", 0.0)} for e in metrics.get("evals", [])]
    rows += [{"step": e["step"], "series": "eval well-formed calls", "value": e["episodes_with_wellformed_call"]}
             for e in metrics.get("evals", [])]
    return (alt.Chart(pl.DataFrame(rows)).mark_line(point=True)
            .encode(x="step:Q", y=alt.Y("value:Q", title="reward / score"), color="series:N",
                    tooltip=["step", "series", "value"])
            .properties(title="GRPO: rewards and held-out evaluation", width=480, height=260))
