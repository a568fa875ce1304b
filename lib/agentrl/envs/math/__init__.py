"""math: GSM8K word problems with a ``calculator(expression)`` tool and a math-verify reward (README.md beside this
file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

TRAIN = "data/samples/gsm8k_train_100.jsonl"  # 100 GSM8K training problems
HELDOUT = "data/samples/gsm8k_heldout_200.jsonl"  # the last 200 problems of GSM8K's training file: never trained on

PROMPTS = {
    "math": (
        "You solve math word problems. Reason step by step; use the `calculator` tool for arithmetic (at most "
        "{max_calls} calls). Reply with the final number only inside <answer></answer> tags, for example "
        "<answer>72</answer>."
    ),
}


def math_task(*, prompt: str | None = None, max_calls: int = 20):
    """Return the GSM8K math Task with the calculator tool and math-verify scoring."""
    import functools

    from agentrl.envs import registry
    from agentrl.envs.math.env import MathEnv, math_score, oracle_plan
    from agentrl.envs.task import Task

    prompt = prompt or "math"
    return Task(name=ENVIRONMENT.name, make_env=functools.partial(MathEnv, max_calls=max_calls),
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls), oracle_plan=oracle_plan,
                score=math_score, config={"prompt": prompt, "max_calls": max_calls})


def build(settings, preset: dict | None = None):
    """Return the math Task (the prompt from ``settings``; 20 calculator calls)."""
    return math_task(prompt=settings.prompt)


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """Return GSM8K problems: ``train`` the 100 bundled training problems, ``eval`` and ``heldout`` the held-out
    slice; ``source`` a GSM8K-layout JSONL file. (The two files number their problems from 0 each: their ids
    overlap, their items do not.)"""
    from agentrl.core.config import data_file
    from agentrl.envs.math.env import load_gsm8k

    return load_gsm8k(data_file(source or (TRAIN if split == "train" else HELDOUT)))


def score(prediction, row, env) -> dict:
    """Return the math metrics of the episode (agentrl.envs.math.env.math_score)."""
    from agentrl.envs.math.env import math_score

    return math_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="math", summary="GSM8K word problems with a calculator tool, math-verify scoring", build=build, rows=rows,
    env_class="agentrl.envs.math.env:MathEnv", score=score, prompts=PROMPTS,
    rewards={"math_correct": 1.0, "format": 0.1}, reward_metrics={"math_correct": "correct"},
    metrics=("calculator_calls",), pooled=True, demo_items=8, folder=__name__)
