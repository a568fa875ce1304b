"""Code environment rewards on real HumanEval problems, each answer checked in the real sandbox."""

import json

import pytest

from agentrl.envs.code.env import CodeEnv, humaneval_tasks
from agentrl.rollout.rewards import reward_registry, task_success

code_pass = reward_registry()["code_pass"]

ROWS = humaneval_tasks()[:3]


def episode(row: dict) -> CodeEnv:
    env = CodeEnv()
    env.reset(**{**row, "task": json.dumps(row["metadata"])})
    return env


def answer(text: str) -> list[dict]:
    return [{"role": "assistant", "content": f"<answer>{text}</answer>"}]


@pytest.mark.slow
def test_code_pass_is_pass_at_1_of_the_final_function_in_the_sandbox():
    good = ROWS[0]["metadata"]["prompt"] + ROWS[0]["metadata"]["canonical_solution"]
    wrong = good.replace("return True", "return False")
    spin = ROWS[0]["metadata"]["prompt"] + "    while True:\n        pass\n"
    envs = [episode(ROWS[0]) for _ in range(4)]
    completions = [answer(good), answer(wrong), answer(spin), [{"role": "assistant", "content": "no tags"}]]
    assert code_pass(None, completions, environments=envs) == [1.0, 0.0, 0.0, 0.0]
    assert task_success(None, completions, environments=envs) == [1.0, 0.0, 0.0, 0.0]
    assert code_pass(None, completions[:1], environments=[None]) == [None]


def test_a_body_only_answer_passes_and_an_answer_scored_twice_gives_the_same_metrics():
    env = episode(ROWS[2])
    body = answer(ROWS[2]["metadata"]["canonical_solution"].strip())
    first = code_pass(None, [body], environments=[env])
    assert first == [1.0] and env._scored is not None
    assert task_success(None, [body], environments=[env]) == first
    env.reset(**{**ROWS[1], "task": json.dumps(ROWS[1]["metadata"])})  # a new episode forgets the last score
    assert env._scored is None and code_pass(None, [body], environments=[env]) == [0.0]
