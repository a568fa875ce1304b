"""math: GSM8K word problems with a ``calculator(expression)`` tool and a math-verify reward (README.md beside this
file)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentrl.core.config import data_file
from agentrl.core.validate import AtLeast0, AtLeast1, ExistingFile
from agentrl.envs import registry
from agentrl.envs.math.env import MathEnv, load_gsm8k, math_score, oracle_plan
from agentrl.envs.registry import Environment
from agentrl.envs.task import EnvSettings, Task

TRAIN = "data/samples/gsm8k_train_100.jsonl"  # 100 GSM8K training problems
HELDOUT = "data/samples/gsm8k_heldout_200.jsonl"  # the last 200 problems of GSM8K's training file: never trained on
MAX_CALLS = 20

PROMPTS = {
    "math": (
        "You solve math word problems. Reason step by step; use the `calculator` tool for arithmetic (at most "
        "{max_calls} calls). Reply with the final number only inside <answer></answer> tags, for example "
        "<answer>72</answer>."
    ),
}


@dataclass
class MathSettings(EnvSettings):
    """The math environment's settings ([eval.math], [grpo.math]): its two GSM8K-layout files and their splits."""

    train_qa: ExistingFile = TRAIN  # training problems (GSM8K layout)
    qa: ExistingFile = HELDOUT  # held-out problems (GSM8K layout): never trained on
    train: AtLeast1 | None = None  # training problems, from the first (None: all)
    validation: AtLeast0 = 0  # the last problems of ``qa``: hyperparameters are chosen on them, never reported
    heldout: AtLeast0 | None = None  # the first N problems of ``qa`` (None: all but the validation ones)


def math_task(*, prompt: str | None = None, max_calls: int = MAX_CALLS, max_turns: int = 6):
    """Return the GSM8K math Task with the calculator tool and math-verify scoring."""
    prompt = prompt or "math"
    return Task(name=ENVIRONMENT.name, make_env=functools.partial(MathEnv, max_calls=max_calls),
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls), oracle_plan=oracle_plan,
                score=math_score, config={"prompt": prompt, "max_calls": max_calls}, max_turns=max_turns)


def build(settings: MathSettings, preset: dict | None = None):
    """Return the math Task for ``settings`` (20 calculator calls unless max_tool_calls says otherwise)."""
    return math_task(prompt=settings.prompt,
                     max_calls=MAX_CALLS if settings.max_tool_calls is None else settings.max_tool_calls,
                     max_turns=settings.max_turns or ENVIRONMENT.max_turns)


def rows(split: str, settings: MathSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return GSM8K problems of ``split``: ``train`` from ``train_qa``, ``validation`` the last ``validation`` of
    ``qa``, ``heldout`` the others (the first ``heldout`` of them when set); ``source`` replaces the split's file."""
    if split == "all":
        if source is not None:  # one file: its problems, once
            return load_gsm8k(data_file(source))
        return [r for s in ("train", "validation", "heldout") for r in rows(s, settings, preset, source)]
    if split == "train":
        found = load_gsm8k(data_file(source or settings.train_qa))
        return found if settings.train is None else found[:settings.train]
    found = load_gsm8k(data_file(source or settings.qa))
    val = min(max(0, settings.validation), len(found))
    if split == "validation":
        return found[len(found) - val:]
    found = found[:len(found) - val]
    return found if settings.heldout is None else found[:settings.heldout]


def score(prediction, row, env) -> dict:
    """Return the math metrics of the episode (agentrl.envs.math.env.math_score)."""
    return math_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="math", summary="GSM8K word problems with a calculator tool, math-verify scoring", build=build, rows=rows,
    settings=MathSettings, env_class="agentrl.envs.math.env:MathEnv", score=score, prompts=PROMPTS,
    rewards={"math_correct": 1.0, "format": 0.1}, reward_metrics={"math_correct": "correct"},
    metrics=("calculator_calls",), demo_items=8, folder=__name__,
    max_new_tokens=384)  # step-by-step reasoning around a few calculator calls
