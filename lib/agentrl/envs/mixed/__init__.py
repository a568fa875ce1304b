"""mixed: one GRPO run over several environments, each row played in its own family's environment (README.md beside
this file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

PROMPTS = {
    "mixed": (
        "Solve the task with the tools that fit it: `act` for a text game (one command per call), `calculator` "
        "for arithmetic in a math problem, `run_python` to test code, `execute_sql` for a database question. "
        "Reply with the final answer inside <answer></answer> tags: the number for math, the complete function "
        "for code, the values for a database question, done for a game."
    ),
}


def build(settings, preset: dict | None = None):
    """Return the mixed Task: every family built from ``settings``; ``settings.mixture`` (GRPO's) those built first."""
    from agentrl.envs.mixed.env import mixed_task

    return mixed_task(settings, preset, getattr(settings, "mixture", None) or {})


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """A mixture has no rows of its own: GRPO draws them from its families (grpo.mixture)."""
    from agentrl.core.io import DataError

    raise DataError("the mixed environment's rows come from its families: set grpo.mixture, e.g. "
                    "{math = 0.5, code = 0.25, textgame = 0.25}")


def score(prediction, row, env) -> dict:
    """Return the metrics of the row's family (agentrl.envs.mixed.env.mixed_score)."""
    from agentrl.envs.mixed.env import mixed_score

    return mixed_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="mixed", summary="several environments in one GRPO run, each row in its own family's environment",
    build=build, rows=rows, score=score, prompts=PROMPTS, rewards={"task_success": 1.0, "format": 0.1},
    env_class="agentrl.envs.mixed.env:MixedEnv", routes=True, evaluable=False, folder=__name__)
