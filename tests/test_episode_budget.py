"""An episode's token budget after the prompt (GRPO's max_completion_length: the model's tokens and the tool results),
as sampling runs attempts under it: a turn that starts or ends over the budget ends the episode with finish
"length" and no answer, as TRL's rollout would be cut. A policy that reports its token counts stands in for a model;
the tools are the math environment's real calculator."""

import asyncio
import json

from agentrl.core.chat import Turn
from agentrl.envs.math import MathSettings, build


class Counting:
    """A policy whose turns report a fixed prompt growth: the prompt is 100 tokens, each tool round adds
    ``result_tokens`` and each turn generates ``turn_tokens``; it calls the calculator ``calls`` times, then answers."""

    kind = "scripted"
    model = "scripted"

    def __init__(self, calls: int, turn_tokens: int, result_tokens: int):
        self.calls, self.turn_tokens, self.result_tokens = calls, turn_tokens, result_tokens

    def describe(self) -> dict:
        return {"kind": self.kind}

    async def generate(self, messages, tools, row=None) -> Turn:
        done = sum(1 for m in messages if m["role"] == "assistant")
        prompt = 100 + done * (self.turn_tokens + self.result_tokens)
        if done < self.calls:
            call = {"id": f"c{done}", "name": "calculator", "arguments": json.dumps({"expression": "2+3"})}
            return Turn(tool_calls=[call], prompt_tokens=prompt, completion_tokens=self.turn_tokens)
        return Turn(content="<answer>5</answer>", finish_reason="stop", prompt_tokens=prompt,
                    completion_tokens=self.turn_tokens)


def episode(policy, budget):
    from agentrl.rollout.agent import run_episode

    task = build(MathSettings())
    row = {"id": "m", "question": "What is 2+3?", "golden_answers": ["5"], "metadata": {}}
    return asyncio.run(run_episode(policy, task, row, max_turns=6, budget=budget))


def test_an_episode_within_the_budget_answers():
    traj = episode(Counting(calls=2, turn_tokens=20, result_tokens=30), budget=150)  # 2 x (20 + 30) + 20 = 120
    assert traj["finish"] == "answer" and traj["prediction"] == "5" and traj["metrics"]["correct"] == 1.0


def test_tool_results_that_overflow_the_budget_end_the_episode_before_the_next_turn():
    traj = episode(Counting(calls=3, turn_tokens=20, result_tokens=60), budget=150)  # 80, then 160 before turn 3
    assert traj["finish"] == "length" and traj["prediction"] is None and traj["metrics"]["correct"] == 0.0
    assert sum(m["role"] == "assistant" for m in traj["messages"]) == 2  # the third turn never happened


def test_a_turn_that_ends_over_the_budget_ends_the_episode_without_its_answer():
    traj = episode(Counting(calls=1, turn_tokens=60, result_tokens=10), budget=120)  # 70 + 60 = 130 with the answer
    assert traj["finish"] == "length" and traj["prediction"] is None
    assert traj["messages"][-1] == {"role": "assistant", "content": "<answer>5</answer>"}  # written, not counted


def test_without_a_budget_nothing_is_cut():
    traj = episode(Counting(calls=3, turn_tokens=500, result_tokens=500), budget=None)
    assert traj["finish"] == "answer" and traj["prediction"] == "5"
