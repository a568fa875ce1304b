"""The trainers' settings: TRL's ``SFTConfig`` / ``GRPOConfig`` / ``DPOConfig`` with agentrl's own fields added.

A trainer table of a preset (``[sft]``, ``[grpo]``, ``[dpo]``, ``[rft]``) holds TRL's field names as TRL spells them
(``per_device_train_batch_size``, ``max_completion_length``, ``importance_sampling_level``, ...) and the fields of the
dataclasses below (the model, the adapter, the data, the run's name, ...); there is no second name for a TRL field
(an old name is an error naming the new one: ``batch_size`` -> ``per_device_train_batch_size``). The settings are
built once, at the entry point, from the merged preset (agentrl.core.config): names, types and TRL's allowed values
checked (agentrl.train.trl_fields), before anything loads.

TRL's own config object cannot be built that early on every machine (``bf16`` of a GPU preset checked on a CPU; and
Unsloth must patch TRL before it is imported), so it is built once, at training start, by :func:`trl_args`: an
instance of agentrl's subclass of the config class TRL exports then (:func:`config_class`; Unsloth's patched one on
that backend), with the preset's fields, the fields agentrl derives (:data:`DERIVED`: the output directory, the
machine's precision, the reward weights, ...) and the run's settings as ``agentrl``.
"""

from __future__ import annotations

import copyreg
import functools
import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from agentrl.core.config import to_dict
from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, Moved, SettingError, from_dict
from agentrl.envs import registry
from agentrl.envs.registry import EnvTables
from agentrl.rollout.judge import JudgeConfig
from agentrl.rollout.rewards import reward_misfit, reward_registry
from agentrl.train import trl_fields
from agentrl.train.models import ModelConfig
from agentrl.train.trl_fields import CONFIGS, TRLFields, default

DERIVED = {  # TRL fields agentrl sets itself, and from what (a preset setting one is told so)
    "common": {"output_dir": "runs/<phase>/<name>/trainer", "use_cpu": "the machine: CUDA or not",
               "bf16": "the GPU (bf16 where native, else fp16) or the CPU measurement (model.cpu_precision)",
               "fp16": "the GPU (bf16 where native, else fp16)", "disable_tqdm": "whether stderr is a terminal"},
    "sft": {"assistant_only_loss": "the chat template (loss on assistant tokens only)"},
    "grpo": {"reward_weights": "the rewards of the environment's table ([grpo.<env>] rewards)",
             "vllm_max_model_length": "model.max_seq_length"},
    "dpo": {},
}
# TRL fields passed to the config even when the preset leaves them out, with TRL's default: Unsloth's patched
# configs replace these defaults (adamw_8bit, weight decay 0.001, warmup 0.1, seed 3407, a learning rate of 5e-5,
# batch 4 x 2, logging every step, ...), so both backends train alike only when they are given explicitly
PINNED = {
    "common": ("learning_rate", "lr_scheduler_type", "warmup_steps", "optim", "weight_decay", "max_grad_norm",
               "per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps", "report_to", "seed",
               "max_steps", "num_train_epochs", "save_strategy", "save_steps", "save_total_limit",
               "gradient_checkpointing"),
    "sft": ("per_device_eval_batch_size", "max_length", "packing", "eval_steps", "dataset_num_proc",
            "remove_unused_columns"),
    "grpo": ("num_generations", "max_completion_length", "max_tool_calling_iterations", "temperature", "top_p", "beta",
             "loss_type", "scale_rewards", "epsilon", "epsilon_high", "mask_truncated_completions",
             "vllm_importance_sampling_correction", "log_completions", "use_vllm", "vllm_mode",
             "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "router_aux_loss_coef"),
    "dpo": ("beta", "loss_type", "max_length"),
}
# keys of the tables before TRL's names were used: an error naming where each went
MOVED = {
    "batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
    "warmup": "warmup_steps", "lr_scheduler": "lr_scheduler_type", "epochs": "num_train_epochs",
    "trl": "its keys directly in this table (TRL's field names)",
    "rewards": "the environment's table: [grpo.<env>] rewards", "mixture": "[grpo.mixed] mixture",
    "mixture_rows": "[grpo.mixed] train", "qa": "the environment's table: [grpo.<env>] qa (train_qa for sql, math)",
    "train_questions": "the environment's table: [grpo.<env>] train",
    "train_offset": "the environment's split: [grpo.<env>] train / validation / heldout",
    "eval_offset": "the environment's split: [grpo.<env>] heldout", "check_offset": "the [eval.<env>] heldout split",
    "top_k": "[<run>.search] top_k", "max_searches": "[<run>.<env>] max_tool_calls",
    "passage_chars": "[<run>.search] passage_chars", "search_method": "[<run>.search] search_method",
    "raw_chunks": "[<run>.search] raw_chunks", "index": "[<run>.search] index", "mcp_url": "[<run>.search] mcp_url",
    "max_query_chars": "[<run>.search] max_query_chars", "prompt": "[<run>.<env>] prompt",
    "sql_partial_credit": "[<run>.sql] partial_credit", "sql_jaccard": "[<run>.sql] jaccard",
    "sql_scoring": "[<run>.sql] scoring", "sql_backend": "[<run>.sql] backend", "env_args": "[<run>.<env>]",
    "eval_max_new_tokens": "[eval.<env>] max_new_tokens (the environment's evaluation budget, which every evaluation "
                           "of it reads)",
    "check_max_new_tokens": "[eval.<env>] max_new_tokens (the environment's evaluation budget, which every "
                            "evaluation of it reads)",
}


def record(settings) -> dict:
    """Return what a run's manifest records of its settings: every field (TRL's as the preset set them, under
    ``trl``), the environments' settings included."""
    out = to_dict(settings)
    out.pop("moved", None)
    return out


def _trl(kind: str) -> Any:
    return field(default_factory=dict, metadata={"extra": TRLFields(kind, {**DERIVED["common"], **DERIVED[kind]})})


def _moved(keys=MOVED) -> Any:
    return field(default_factory=dict, metadata={"extra": Moved(keys)})


_NOTED: set[str] = set()


class TRLSettings:
    """What SFT, GRPO and DPO settings share: TRL's fields, read as attributes (``settings.learning_rate``: the
    preset's value, else TRL's default)."""

    KIND: ClassVar[str] = ""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("trl", "moved"):
            raise AttributeError(name)
        trl = self.__dict__.get("trl") or {}
        if name in trl:
            return trl[name]
        try:
            return default(self.KIND, name)
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}") from None

    def trl_value(self, name: str) -> Any:
        """Return TRL field ``name`` as this run sets it (the preset's value, else TRL's default)."""
        return getattr(self, name)

    @classmethod
    def of(cls, **table):
        """Return the settings of a table given as keyword arguments, checked as a preset's would be
        (``GRPOSettings.of(max_steps=2, search={"top_k": 2})``: a benchmark's or a test's own run)."""
        return from_dict(cls, table, cls.KIND)


@dataclass
class SFTSettings(TRLSettings):
    """The ``[sft]`` (and ``[rft]``) table: agentrl's fields below, and TRL's SFTConfig fields."""

    KIND: ClassVar[str] = "sft"
    name: str = "sft"
    data: str = "runs/data/sft_demo"  # curated dataset directory (trl/ export inside) or a trl .jsonl
    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: str | None = None  # continue training this LoRA adapter (rejection-sampling fine-tuning: SFT's)
    overlong: Literal["drop", "truncate"] = "drop"  # sequences over max_length: dropped, or truncated and counted
    merge: bool = False  # also save a 16-bit merged model
    # the prompt prefix a batch's demonstrations share (system prompt, tool schema) read once (agentrl.train.
    # sft_trainer): "auto" = on a CPU with the transformers backend, "on", "off"
    share_prompt_prefill: Literal["auto", "on", "off"] = "auto"
    check_questions: AtLeast0 = 20  # held-out items of the evaluation's environment for the base-vs-adapter check
    trl: dict = _trl("sft")
    moved: dict = _moved()


@dataclass
class GRPOSettings(TRLSettings):
    """The ``[grpo]`` table: agentrl's fields below, the environment's table (``[grpo.search]``: its settings and
    rewards), and TRL's GRPOConfig fields."""

    KIND: ClassVar[str] = "grpo"
    name: str = "grpo"
    env: str = registry.DEFAULT  # a registered environment or a user's environment (path/to/my_env.py)
    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: str | None = None  # start from this LoRA adapter (e.g. the SFT one); None or "" = fresh LoRA on the base
    judge: JudgeConfig | None = None  # the LLM judge of a ``judge`` reward
    items: str | None = None  # a sample run (or its filtered.json): train only on the items it kept (difficulty filter)
    skip_equal_groups: bool = True  # groups whose rewards are all equal carry no loss (agentrl.train.trainers)
    # rollouts generated with the LoRA adapter merged into a copy of the weights (agentrl.train.lora_merge): "auto" =
    # on a CPU (measured faster there, benchmarks/grpo_step.py; the copy costs GPU memory), "on", "off"
    merge_for_generation: Literal["auto", "on", "off"] = "auto"
    # prompt tokens the rows share read once, in every turn and in the loss (agentrl.train.shared_prefill): "auto" = on
    # a CPU with the transformers backend (measured there; Unsloth and vLLM compute these passes their own way)
    share_prompt_prefill: Literal["auto", "on", "off"] = "auto"
    # a decode step that copies no keys (grouped-query attention in place, a cache grown in place:
    # agentrl.rollout.decode) on agentrl's generation path (share_prompt_prefill's): "auto" = on a CPU, "on", "off"
    fast_decode: Literal["auto", "on", "off"] = "auto"
    # the loss's micro-batch without rows that have no loss token and columns of padding only (agentrl.train.loss_batch;
    # exact under dapo, bnpo, cispo, vespo, left as TRL builds it under the others): "auto" = on a CPU; "on", "off"
    compact_loss_batch: Literal["auto", "on", "off"] = "auto"
    eval_every: AtLeast0 = 0  # steps between held-out agent evaluations (0 = only at the end)
    eval_questions: AtLeast0 | None = None  # held-out items evaluated (the first of the env's heldout split; None: all)
    envs: dict = field(default_factory=dict, metadata={"extra": EnvTables(training=True)})
    # the environment's evaluation budget (turns, tokens per turn) its held-out evaluations and sampling run with: the
    # preset's [eval.<env>] table's, set where the preset builds these settings (agentrl.app.presets); not a key here
    budget: registry.Budget = field(default_factory=registry.Budget, metadata={"moved": (
        "[eval.<env>] max_turns / max_new_tokens (the environment's evaluation budget, which every evaluation of it "
        "reads)")})
    trl: dict = _trl("grpo")
    moved: dict = _moved()

    def __post_init__(self):
        spec = registry.checked(self.env)
        self.env = spec.name
        self.adapter = self.adapter or None
        self.rewards = dict(self.env_settings.rewards or spec.rewards)
        self.reward_names()  # resolved now: a misspelt or misfit reward stops the run before anything loads
        for key in sorted(set(self.trl) & {f.name for f in fields(spec.settings)} - _NOTED):
            _NOTED.add(key)  # an old preset's [grpo] top_k meant the search tool's: now it is TRL's sampling top_k
            print(f"note: grpo.{key} is TRL's GRPOConfig.{key}; the {spec.name} environment's {key} is "
                  f"[grpo.{spec.name}] {key}")
        if self.merge_for_generation == "on" and self.use_vllm:
            raise SettingError("merge_for_generation", "vLLM generates from its own copy of the weights (the adapter "
                                                       "is synced into it); set it to \"auto\" or \"off\"")
        shape = self.model.lora.given() if self.adapter else []
        if shape:
            raise SettingError(f"model.lora.{shape[0]}", f"GRPO continues from the adapter {self.adapter}, whose "
                               "shape (r, alpha, target_modules, use_rslora) is fixed; remove them from "
                               "[grpo.model.lora] (only dropout applies on top of an adapter), or set "
                               "grpo.adapter = \"\" for a fresh LoRA")

    @property
    def env_settings(self):
        """The settings of the environment GRPO trains on: its table here, else its defaults."""
        return self.envs.get(self.env) or registry.get(self.env).settings()

    def reward_names(self) -> list[str]:
        """Return the configured reward names, each checked: known (generic, an environment's own, or ``judge`` with
        a judge table) and able to score this run's episodes; SettingError naming the reward otherwise."""
        known = reward_registry()
        families = registry.get(self.env).families_of(self.env_settings)
        where = f"{self.env}.rewards"
        for name in self.rewards:
            if name == "judge":
                if self.judge is None:
                    raise SettingError(f"{where}.judge", "the judge reward needs a [grpo.judge] table (model, "
                                                         "base_url)")
            elif name not in known:
                raise SettingError(f"{where}.{name}", f"unknown reward (choose from {', '.join([*known, 'judge'])})")
            misfit = reward_misfit(name, families)
            if misfit:
                raise SettingError(f"{where}.{name}", f"cannot train {self.env} ({', '.join(families)}): {misfit}")
        if not self.rewards:
            raise SettingError(where, "no reward")
        return list(self.rewards)


@dataclass
class DPOSettings(TRLSettings):
    """The ``[dpo]`` table: agentrl's fields below, and TRL's DPOConfig fields."""

    KIND: ClassVar[str] = "dpo"
    name: str = "dpo"
    data: str = "runs/sample/sample"  # a sample run (pairs/train.jsonl inside) or a pairs .jsonl
    adapter: str | None = "runs/sft/sft/adapter"  # the SFT adapter trained further ("none" or "": a fresh LoRA)
    model: ModelConfig = field(default_factory=ModelConfig)  # name None: the base model the adapter was trained on
    trl: dict = _trl("dpo")
    moved: dict = _moved()

    def __post_init__(self):
        self.adapter = None if self.adapter in (None, "", "none") else self.adapter


# ----------------------------------------------------------------------------- TRL's config, built once


class AgentConfig:
    """agentrl's part of a TRL config: the run's settings as ``agentrl`` beside TRL's fields (the trainer reads
    ``args.agentrl``). Pickled (``training_args.bin`` in a checkpoint) as TRL's own class, without it."""

    def __init__(self, *args, agentrl=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.agentrl = agentrl

    def __reduce__(self):
        base = next(c for c in type(self).__mro__[1:] if c is not AgentConfig)
        state = {k: v for k, v in self.__dict__.items() if k != "agentrl"}
        return copyreg._reconstructor, (base, object, None), state


@functools.cache
def config_class(base: type) -> type:
    """Return agentrl's subclass of TRL's config class ``base`` (``AgentGRPOConfig`` over ``trl.GRPOConfig``, or over
    Unsloth's patched GRPOConfig once unsloth is imported: Unsloth replaces TRL's classes, so the base is the one TRL
    exports when training starts)."""
    return type(f"Agent{base.__name__.removeprefix('Unsloth')}", (AgentConfig, base), {"__module__": __name__})


def trl_args(settings: TRLSettings, derived: dict) -> Any:
    """Return TRL's config for ``settings``: agentrl's subclass of the config class TRL exports now, with the preset's
    TRL fields, the :data:`PINNED` ones (TRL's defaults where the preset is silent) and ``derived`` (agentrl's own,
    :data:`DERIVED`), ``agentrl`` = the settings. TRL's own checks of the values (``__post_init__``) refusing them is a
    DataError naming the table."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    kind = settings.KIND
    unknown = set(derived) - set(DERIVED["common"]) - set(DERIVED[kind]) - {"eval_strategy", "gradient_checkpointing",
                                                                            "report_to", "epsilon_high"}
    if unknown:
        raise ValueError(f"trl_args: {sorted(unknown)} are not fields agentrl derives")
    pinned = {name: settings.trl_value(name) for name in (*PINNED["common"], *PINNED[kind])
              if name in _field_names(kind)}
    kwargs = {**pinned, **settings.trl, **derived}
    cls = config_class(getattr(trl, CONFIGS[kind]))
    try:
        return cls(agentrl=settings, **kwargs)
    except (ValueError, TypeError, ZeroDivisionError, AssertionError) as exc:  # TRL's own checks of its fields
        raise DataError(f"[{kind}]: TRL's {CONFIGS[kind]} refuses these settings: {exc}") from None


def _field_names(kind: str) -> set[str]:
    return set(trl_fields.fields(kind))


def upper_clip(settings: GRPOSettings) -> float:
    """Return the upper clip range the run trains with: ``epsilon_high`` when set, else what stock TRL 1.14.2's
    trainer uses for None (``epsilon``), or for ``loss_type = "cispo"`` 5.0 (its cap is epsilon_high itself, not
    1 + epsilon_high: Unsloth 2026.10.9 resolves None to 5.0 there, TRL would cap every weight at 0.2). Passed
    as a number, it is what both TRL and Unsloth's patched config use (Unsloth replaces only a None)."""
    if settings.epsilon_high is not None:
        return float(settings.epsilon_high)
    return 5.0 if settings.loss_type == "cispo" else float(settings.epsilon)
