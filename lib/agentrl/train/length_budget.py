"""Rollouts that run out of ``max_completion_length`` before they answer, counted instead of lost silently.

In TRL's tool loop the budget covers the model's tokens *and* the tool results. When a tool result would overflow it,
TRL drops that result and ends the rollout on the tool call: no answer, so the answer reward is 0 for a reason the
policy cannot learn from. A budget below the policy's usual episode does this to every rollout (cpu_smol's 256
tokens against SFT-taught search episodes of two searches, median 374 tokens: GRPO saw answer reward 0 on all
of them; docs/results.md). The trainer subclass logs per step ``tools/cut_by_length`` (the share of rollouts that
ended this way) and warns once when more than a quarter of a step's rollouts did.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

WARN_SHARE = 0.25  # above this share a step's reward mostly measures the budget


def cut_by_length(completion: list[dict], max_iterations: int) -> bool:
    """Return True when a rollout (its completion messages) ended on a tool call that was never answered while tool
    iterations were left: TRL's overlong case. Ending on a call after ``max_iterations`` tool rounds is the
    iteration limit instead, not counted."""
    if not completion or completion[-1].get("role") != "assistant" or not completion[-1].get("tool_calls"):
        return False
    rounds = sum(1 for m in completion if m.get("role") == "assistant" and m.get("tool_calls"))
    return rounds <= max_iterations


def budget_trainer(base):
    """Return a subclass of TRL's GRPOTrainer ``base`` that logs ``tools/cut_by_length`` per generation batch and
    warns once when over :data:`WARN_SHARE` of a batch's rollouts ran out of ``max_completion_length``."""

    class LengthBudget(base):
        _budget_warned = False

        def _tool_call_loop(self, *args, **kwargs):
            out = super()._tool_call_loop(*args, **kwargs)
            completions = out[1]
            cut = sum(cut_by_length(c, self.max_tool_calling_iterations) for c in completions)
            mode = "train" if self.model.training else "eval"
            share = cut / max(len(completions), 1)
            self._metrics[mode]["tools/cut_by_length"].append(share)
            if share > WARN_SHARE and not self._budget_warned:
                type(self)._budget_warned = True
                log.warning("GRPO: %d of %d rollouts ran out of max_completion_length = %d before answering (tool "
                            "results count towards it; the answer reward is 0 for them): raise "
                            "[grpo].max_completion_length", cut, len(completions), self.max_completion_length)
            return out

    return LengthBudget
