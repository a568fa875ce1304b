"""The difficulty filter in GRPO: training only on the items a sample run kept (:func:`kept_items`, the items whose
k attempts did not all score alike), and skipping the groups whose rewards are all equal (DAPO's dynamic-sampling
remedy, without resampling).

An equal-reward group's advantages are all zero, so it gives no policy gradient, but its tokens still count in the loss
normaliser (``dapo``: tokens of the batch) and dilute every other group's update. The trainer subclass masks these
groups out of the loss (their completion mask set to 0, the token count reduced by theirs) and logs per step
``groups/skipped`` (how many) and ``groups/total``; TRL's ``frac_reward_zero_std`` counts the same completions.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agentrl.core.io import DataError

log = logging.getLogger(__name__)


def equal_groups(advantages, num_generations: int):
    """Return a bool tensor, one per group of ``num_generations`` consecutive completions: True where every
    advantage is zero (all rewards equal; unscorable completions have advantage 0 too)."""
    import torch

    grouped = advantages.view(-1, num_generations)
    return torch.isclose(grouped, torch.zeros_like(grouped)).all(dim=1)


def skipping_trainer(base):
    """Return a subclass of TRL's GRPOTrainer ``base`` that masks equal-reward groups out of the loss and logs
    ``groups/skipped`` and ``groups/total`` per generation batch."""

    class SkipEqualGroups(base):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            adv = output["advantages"]
            n = self.num_generations if self.model.training else self.num_generations_eval or self.num_generations
            if adv.dim() != 1 or adv.numel() % n:
                return output  # groups split across processes: nothing is skipped (logged as 0 below)
            skip = equal_groups(adv, n)
            rows = skip.repeat_interleave(n)
            mask = output["completion_mask"]
            loss_mask = mask if "tool_mask" not in output else mask * output["tool_mask"]
            removed = loss_mask[rows].sum()
            output["completion_mask"] = mask * (~rows).unsqueeze(1).to(mask.dtype)
            output["num_items_in_batch"] = output["num_items_in_batch"] - self.accelerator.gather(removed).sum()
            # straight into this batch's metrics (TRL flushes _log_metric's values inside the call above)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["groups/skipped"].append(float(self.accelerator.gather(skip.sum()).sum()))
            self._metrics[mode]["groups/total"].append(float(self.accelerator.gather(torch_len(skip)).sum()))
            return output

    return SkipEqualGroups


def torch_len(t):
    """Return ``len(t)`` as a one-element tensor on ``t``'s device (for a gather across processes)."""
    import torch

    return torch.tensor(t.numel(), device=t.device)


def kept_items(rows: list[dict], source: str | Path) -> list[dict]:
    """Return the ``rows`` whose id the difficulty filter kept: ``source`` is a sample run directory or its
    ``filtered.json``. No row left is a DataError; ids the rows do not have are logged in one line."""
    from agentrl.core.io import read_json

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
