"""mixed: one GRPO run over several environments, each row played in its own family's environment (README.md beside
this file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.core.validate import AtLeast0, NonNegative
from agentrl.envs.mixed.env import mixed_score, mixed_task, mixture_split
from agentrl.envs.registry import Environment, EnvTables
from agentrl.envs.task import EnvSettings

PROMPTS = {
    "mixed": (
        "Solve the task with the tools that fit it: `act` for a text game (one command per call), `calculator` "
        "for arithmetic in a math problem, `run_python` to test code, `execute_sql` for a database question. "
        "Reply with the final answer inside <answer></answer> tags: the number for math, the complete function "
        "for code, the values for a database question, done for a game."
    ),
}


@dataclass
class MixedSettings(EnvSettings):
    """The mixture's settings ([grpo.mixed]): its members and proportions, how many rows each split draws, and each
    member's own settings as a table named after it (``[grpo.mixed.search] top_k = 2``)."""

    mixture: dict[str, NonNegative] = field(default_factory=dict)  # member -> proportion, e.g. {math = 0.5, code = 0.5}
    train: AtLeast0 = 32  # training rows drawn from the members' train rows in those proportions
    validation: AtLeast0 = 0  # validation rows drawn from the members' validation rows
    heldout: AtLeast0 = 20  # held-out rows drawn from the members' heldout rows
    seed: AtLeast0 = 42  # the shuffle of the drawn rows
    envs: dict = field(default_factory=dict, metadata={"extra": EnvTables(training=False)})  # members' settings


def build(settings: MixedSettings, preset: dict | None = None):
    """Return the mixed Task (agentrl.envs.mixed.env.mixed_task)."""
    return mixed_task(settings, preset)


def rows(split: str, settings: MixedSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return the mixture's rows of ``split``, drawn from its members' rows of that split."""
    if split == "all":
        return [r for s in ("train", "validation", "heldout") for r in mixture_split(settings, s, preset)]
    return mixture_split(settings, split, preset)


def score(prediction, row, env) -> dict:
    """Return the metrics of the row's family (agentrl.envs.mixed.env.mixed_score)."""
    return mixed_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="mixed", summary="several environments in one GRPO run, each row in its own family's environment",
    build=build, rows=rows, score=score, settings=MixedSettings, prompts=PROMPTS,
    rewards={"task_success": 1.0, "format": 0.1}, env_class="agentrl.envs.mixed.env:MixedEnv", evaluable=False,
    families=lambda settings: tuple(settings.mixture), folder=__name__, max_new_tokens=512)
