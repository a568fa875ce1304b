"""A preset's held-out items, which no training path may use: the invariant behind every evaluation it reports.

Held out are, for each GRPO table of the preset (``[grpo]`` and every ``[grpo_<env>]``), the rows its run evaluates
on (:func:`agentrl.train.grpo.split_rows`), the demo's held-out questions (``[demo]`` ``heldout_questions`` after
``train_questions``) and every row of ``[eval] heldout_qa`` (an evaluation-only file). Curation drops trajectories
of these items (and says how many), SFT drops rows of them from its data, GRPO from its training rows. Items are
compared as :func:`agentrl.core.metrics.same_item_key` does (id and normalised question).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def heldout_rows(preset: dict) -> list[dict]:
    """Return the task rows ``preset`` holds out (see the module docstring); [] for a preset without phases."""
    from agentrl.train.grpo import preset_heldout_rows

    return preset_heldout_rows(preset)


def heldout_keys(preset: dict) -> set[tuple[str, str]]:
    """Return the item keys (id, normalised question) of :func:`heldout_rows`."""
    from agentrl.core.metrics import same_item_key

    return {same_item_key(r) for r in heldout_rows(preset)}
