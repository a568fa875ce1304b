"""The shape of a preset, from the phase dataclasses, and loading a preset checked against it.

Every table a phase reads is here with the dataclass that reads it: ``[corpus]`` CorpusConfig, ``[index]``
IndexConfig, ``[eval]`` EvalConfig, ``[data]`` CurateConfig, ``[sft]`` SFTSettings, ``[grpo]`` and ``[grpo_<env>]``
GRPOSettings, ``[sample]`` SampleSettings, ``[dpo]`` DPOSettings, ``[rft]`` SFTSettings (fields replacing
``[sft]``'s), ``[gpu.<CARD>]`` an overlay of those tables per card; ``[demo]`` and ``[demo_envs]`` are the demo's
and the learning benchmark's sizes. ``[sft.trl]`` / ``[grpo.trl]`` take the fields of TRL's SFTConfig / GRPOConfig.
An unknown table or key anywhere is a DataError naming the file, the line and the nearest valid key (or, for an
override, the ``--set`` that wrote it), before anything loads.
"""

from __future__ import annotations

from pathlib import Path

# [demo]: the demo's question split and per-environment item counts (agentrl.app.demo, benchmarks/learning.py)
DEMO_KEYS = ("train_questions", "heldout_questions", "sql_heldout_tasks")
# [demo_envs]: benchmarks/learning.py --envs textgame,math
DEMO_ENVS_KEYS = ("textgame_train_games", "textgame_heldout_games", "textgame_max_turns", "textgame_batch",
                  "textgame_max_new_tokens", "textgame_sft_steps", "math_train", "math_train_problems",
                  "math_heldout_problems", "math_max_new_tokens", "math_sft_steps", "sft_max_length")


def preset_schema() -> dict:
    """Return the schema of a preset (agentrl.core.config.validate_preset): table name -> what it may hold."""
    from agentrl.core.config import Keys, Tables
    from agentrl.data.corpus import CorpusConfig
    from agentrl.data.curate import CurateConfig
    from agentrl.envs import registry
    from agentrl.retrieval.index import IndexConfig
    from agentrl.rollout.evaluate import EvalConfig
    from agentrl.train.dpo import DPOSettings
    from agentrl.train.gpu_plan import CARDS
    from agentrl.train.grpo import GRPOSettings
    from agentrl.train.sample import SampleSettings
    from agentrl.train.sft import SFTSettings

    phases = {"corpus": CorpusConfig, "index": IndexConfig, "eval": EvalConfig, "data": CurateConfig,
              "sft": SFTSettings, "grpo": GRPOSettings, "sample": SampleSettings, "dpo": DPOSettings,
              "rft": SFTSettings,  # [rft] replaces fields of [sft] (agentrl.train.rft)
              **{f"grpo_{env}": GRPOSettings for env in registry.BUILTIN}}
    schema = {**phases,
              "demo": Keys((*DEMO_KEYS, *(f"{env}_tasks" for env in registry.BUILTIN))),
              "demo_envs": Keys(DEMO_ENVS_KEYS),
              "gpu": Tables(lambda: phases, tuple(CARDS))}
    return schema


def load(name_or_path: str | Path, sets: list[str] | tuple[str, ...] | None = ()) -> dict:
    """Return the preset ``name_or_path`` with the ``--set section.key=value`` overrides ``sets`` applied, every
    table and key checked (DataError naming file:line and the nearest valid key otherwise)."""
    from agentrl.core.config import load_preset

    return load_preset(name_or_path, list(sets or ()), schema=preset_schema())


def with_sets(preset: dict, sets: list[str] | tuple[str, ...] | None) -> dict:
    """Return ``preset`` with the (already checked) ``--set`` overrides written over it again: after a
    ``[gpu.<CARD>]`` overlay, so a key the user set on the command line is not replaced by the card's table."""
    from agentrl.core.config import merge_into, nest, parse_set

    for expr in sets or ():
        merge_into(preset, nest(*parse_set(expr)))
    return preset


def set_values(value) -> list[str]:
    """Return the ``--set`` overrides a notebook got (``mo.cli_args()`` gives one string, or a list when the flag
    repeats; ``AGENTRL_NB_ARGS`` the same), as a list of ``section.key=value`` strings."""
    if value is None or value is True:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
