"""The oracle: demonstrations built from gold evidence, labelled ``policy: "oracle"`` wherever they appear.

For a search task it searches each gold supporting title in turn, then answers with the first gold
answer; for a SQL task it runs the gold SQL, then answers with the gold values. It knows nothing the row
does not carry, so on rows without evidence annotations it searches the question itself.
"""

from __future__ import annotations

import json

from agentrl.policies.base import Turn


def search_plan(row: dict) -> list[Turn]:
    """Return the oracle's turns for a search task row: one search per gold title, then the answer."""
    from agentrl.corpus import gold_titles

    titles = gold_titles(row) or [row["question"]]
    turns = [Turn(tool_calls=[{"id": f"call_{i}", "name": "search", "arguments": json.dumps({"query": t})}])
             for i, t in enumerate(titles)]
    from agentrl.metrics import gold_list

    answer = (gold_list(row.get("golden_answers")) or [""])[0]
    return turns + [Turn(content=f"<answer>{answer}</answer>", finish_reason="stop")]


class OraclePolicy:
    """Replay a plan computed from the row; the n-th call returns the plan's n-th turn."""

    kind = "oracle"
    model = "oracle"
    secrets: tuple[str, ...] = ()

    def __init__(self, plan=search_plan):
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
