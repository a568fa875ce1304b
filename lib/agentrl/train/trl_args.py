"""TRL's own config fields, reachable from a preset: ``[sft.trl]`` -> SFTConfig, ``[grpo.trl]`` -> GRPOConfig.

A name TRL's config does not have is an error naming the nearest field it has. A field agentrl already sets from
its own table (``learning_rate`` from ``[grpo] learning_rate``, ``lr_scheduler_type`` from ``lr_scheduler``, ...)
is refused in the ``trl`` table with the key to set instead, so one setting never has two sources. Everything
else passes through to TRL unchanged (e.g. GSPO: ``[grpo.trl] importance_sampling_level = "sequence"``).
"""

from __future__ import annotations

import os

from agentrl.core.io import DataError

# TRL config field -> the agentrl key that sets it, where the names differ ("" = derived by agentrl: no key)
RENAMED = {"lr_scheduler_type": "lr_scheduler", "warmup_steps": "warmup", "per_device_train_batch_size": "batch_size",
           "per_device_eval_batch_size": "batch_size", "gradient_accumulation_steps": "grad_accum",
           "num_train_epochs": "epochs", "vllm_max_model_length": "model.max_seq_length",
           "gradient_checkpointing": "model.gradient_checkpointing", "save_strategy": "save_steps",
           "output_dir": "", "use_cpu": "", "bf16": "", "fp16": "", "disable_tqdm": "", "reward_weights": "rewards",
           "assistant_only_loss": "", "truncation_mode": "", "eval_strategy": "eval_steps", "dataset_num_proc": "",
           "remove_unused_columns": "", "logging_first_step": "", "num_completions_to_print": ""}

# the GRPOConfig / SFTConfig fields agentrl's training_args set (tests check these lists against the code)
GRPO_OWNED = ("output_dir", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "optim",
              "weight_decay", "max_grad_norm", "per_device_train_batch_size", "gradient_accumulation_steps",
              "num_generations", "max_completion_length", "max_tool_calling_iterations", "temperature", "top_p",
              "beta", "loss_type", "scale_rewards", "epsilon", "epsilon_high", "mask_truncated_completions",
              "vllm_importance_sampling_correction", "reward_weights", "log_completions", "num_completions_to_print",
              "logging_steps", "report_to", "seed", "use_cpu", "bf16", "fp16", "gradient_checkpointing", "use_vllm",
              "vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_server_host",
              "vllm_server_port", "vllm_max_model_length", "disable_tqdm", "save_strategy", "save_steps",
              "save_total_limit")
SFT_OWNED = ("output_dir", "num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps",
             "weight_decay", "optim", "per_device_train_batch_size", "per_device_eval_batch_size",
             "gradient_accumulation_steps", "max_length", "truncation_mode", "packing", "assistant_only_loss",
             "gradient_checkpointing", "eval_strategy", "eval_steps", "logging_steps", "logging_first_step",
             "report_to", "seed", "use_cpu", "bf16", "fp16", "disable_tqdm", "dataset_num_proc",
             "remove_unused_columns", "save_strategy", "save_steps", "save_total_limit")


def trl_fields(kind: str) -> tuple[str, ...]:
    """Return the init field names of the installed TRL's ``GRPOConfig`` (kind "grpo") or ``SFTConfig`` ("sft")."""
    import dataclasses

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if kind == "grpo":
        from trl import GRPOConfig as cls
    else:
        from trl import SFTConfig as cls
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def grpo_fields() -> tuple[str, ...]:
    """Return GRPOConfig's field names (the valid keys of ``[grpo.trl]``)."""
    return trl_fields("grpo")


def sft_fields() -> tuple[str, ...]:
    """Return SFTConfig's field names (the valid keys of ``[sft.trl]``)."""
    return trl_fields("sft")


def check_trl_table(table: dict, kind: str, owned: tuple[str, ...] | set[str] | None = None) -> dict:
    """Return ``table`` (``[<kind>.trl]``) when every name is a field of TRL's config that agentrl does not set
    itself (``owned``, default GRPO_OWNED / SFT_OWNED); else raise DataError naming the nearest field, or the
    agentrl key to set instead."""
    import difflib

    if not table:
        return {}
    fields = trl_fields(kind)
    owned = set(owned if owned is not None else (GRPO_OWNED if kind == "grpo" else SFT_OWNED))
    config = "GRPOConfig" if kind == "grpo" else "SFTConfig"
    for name in table:
        if name not in fields:
            near = difflib.get_close_matches(name, fields, n=1, cutoff=0.5)
            raise DataError(f"{kind}.trl.{name}: TRL's {config} has no field '{name}'"
                            + (f" (did you mean '{kind}.trl.{near[0]}'?)" if near else ""))
        if name in owned:
            key = RENAMED.get(name, name)
            raise DataError(f"{kind}.trl.{name}: agentrl sets {config}.{name} itself"
                            + (f" from {kind}.{key}; set that instead" if key else " (it is not a setting)"))
    return dict(table)


def with_trl(kwargs: dict, table: dict, kind: str) -> dict:
    """Return ``kwargs`` (what training_args builds) plus the ``[<kind>.trl]`` fields, refusing any that
    ``kwargs`` already sets."""
    default = GRPO_OWNED if kind == "grpo" else SFT_OWNED
    return {**kwargs, **check_trl_table(table, kind, owned=set(kwargs) | set(default))}
