"""Rejection-sampling fine-tuning: SFT on the model's own successful attempts (``agentrl export --successes``),
continuing the SFT adapter. The ``[rft]`` table of a preset replaces fields of ``[sft]`` (as ``[grpo_sql]`` does
for ``[grpo]``); the run is an ordinary SFT run (agentrl.train.sft) under ``runs/sft/<name>/``."""

from __future__ import annotations

from agentrl.core.io import DataError


def rft_config(preset: dict | None = None, **overrides):
    """Return the SFTSettings of the rejection-sampling run: ``[sft]`` with ``[rft]``'s fields replacing its own,
    then the non-None ``overrides``. Without an ``[rft]`` table it is a DataError (the data and adapter must be
    named)."""
    from agentrl.train.sft import sft_config

    preset = preset or {}
    table = preset.get("rft")
    if not table:
        raise DataError("the preset has no [rft] table (name, data = \"runs/sample/NAME/successes\", adapter = the "
                        "SFT adapter)")
    sft = {**(preset.get("sft") or {}), **table}
    if "model" in table and "model" in (preset.get("sft") or {}):
        sft["model"] = {**preset["sft"]["model"], **table["model"]}
    return sft_config({**preset, "sft": sft}, **overrides)
