"""The oracle: demonstrations built from gold evidence, labelled ``policy: "oracle"`` wherever they appear.

Each environment that has an oracle declares its plan (a task row -> the turns to replay): the search
environment searches each gold supporting title in turn, then answers with the first gold answer; the SQL
environment runs the gold statement, then answers with the gold values. A plan knows nothing the row does not
carry.
"""

from __future__ import annotations

from agentrl.core.chat import Turn
from agentrl.core.io import DataError


class OraclePolicy:
    """Replay a plan computed from the row; the n-th call returns the plan's n-th turn."""

    kind = "oracle"
    model = "oracle"
    secrets: tuple[str, ...] = ()

    def __init__(self, plan):
        if plan is None:
            raise DataError("this environment has no oracle (its declaration gives no oracle plan)")
        self.plan = plan

    def describe(self) -> dict:
        """Return the policy settings for a manifest."""
        return {"kind": self.kind, "plan": self.plan.__name__}

    async def generate(self, messages: list[dict], tools: list[dict], row: dict | None = None) -> Turn:
        """Return the next turn of the plan for ``row`` (the final answer once the plan is exhausted)."""
        plan = self.plan(row or {})
        done = sum(1 for m in messages if m["role"] == "assistant")
        turn = plan[min(done, len(plan) - 1)]
        return Turn(content=turn.content, tool_calls=[dict(c) for c in turn.tool_calls],
                    finish_reason=turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop"),
                    prompt_tokens=0, completion_tokens=0)
