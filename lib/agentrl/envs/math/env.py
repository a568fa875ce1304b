"""Math environment (GSM8K): an optional ``calculator(expression)`` tool and a verifiable reward (math-verify).

Sample task (GSM8K's own layout, read by :func:`load_gsm8k`; the final answer follows ``####``)::

    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.
                  How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\\n... 48+24 = <<48+24=72>>72 ...\\n#### 72"}

becomes ``{"id": "gsm8k_0", "question": ..., "golden_answers": ["72"], "metadata": {"solution": ...,
"calculations": ["48/2", "48+24"]}}``. Metrics of an episode:

- ``correct``: 1 when the final ``<answer>`` equals the gold number by math-verify (``72``, ``72.0``,
  ``$72``, ``\\boxed{72}`` all count); ``em``/``f1``/``acc``/``precision``/``recall`` repeat it.
- ``answered``: 1 when there was a non-empty ``<answer>``; ``calculator_calls``: calls of the tool.

The LLM judge (``agentrl eval --judge-model``, GRPO reward ``judge``) is the optional second opinion: it
retries empty replies, falls back (recorded) to math-verify with ``fallback = "math_verify"``, and caches on
disk (agentrl.rollout.judge). The calculator parses the expression with ``ast`` and evaluates only numbers and
``+ - * / // % **`` (bounded exponent and size): no ``eval`` of model text.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from pathlib import Path

from agentrl.core.chat import Turn
from agentrl.core.io import DataError, iter_jsonl
from agentrl.core.metrics import gold_list, math_equal
from agentrl.envs.base import ToolError

HELD_OUT = 200  # the last 200 problems of the training file are the fixed evaluation slice, never trained on
_CALC = re.compile(r"<<([^=<>]+)=[^<>]*>>")
_MAX_EXPR = 200
_MAX_ABS = 1e15
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def calculate(expression: str) -> float | int:
    """Return the value of an arithmetic expression; ValueError for anything but numbers and + - * / // % **."""
    text = str(expression).replace(",", "").replace("x", "*").replace("×", "*").replace("÷", "/").strip()
    if not text or len(text) > _MAX_EXPR:
        raise ValueError(f"expression must be 1-{_MAX_EXPR} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None

    def ev(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(b) > 64 or abs(a) > 1e6):
                raise ValueError("exponent too large")
            try:
                v = _OPS[type(node.op)](a, b)
            except ZeroDivisionError:
                raise ValueError("division by zero") from None
            if isinstance(v, complex) or abs(v) > _MAX_ABS:
                raise ValueError("result out of range")
            return v
        raise ValueError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")

    value = ev(tree.body)
    return int(value) if isinstance(value, float) and value.is_integer() else value


class MathEnv:
    """A GSM8K problem per episode with a calculator tool; reset with a math task row."""

    def __init__(self, max_calls: int | None = 20):
        self._max_calls = max_calls
        self.calls = 0

    def reset(self, **row) -> None:
        """Start an episode (the calculator keeps no state besides its call count)."""
        self.calls = 0

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, for example "(48 + 24) * 2 / 3".
        """
        if self._max_calls is not None and self.calls >= self._max_calls:
            raise ToolError(f"Call limit reached ({self._max_calls} calculations). Give your answer now.")
        self.calls += 1
        value = calculate(expression)
        return f"{round(value, 6) if isinstance(value, float) else value}"


def math_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the math metrics of an episode (see the module docstring); the task's scoring hook."""
    golds = gold_list((row or {}).get("golden_answers"))  # a bare string is one answer, not its characters
    ok = float(any(math_equal(prediction, g) for g in golds))
    return {"correct": ok, "answered": float(bool(prediction and prediction.strip())),
            "calculator_calls": float(env.calls if env is not None else 0),
            "em": ok, "f1": ok, "acc": ok, "precision": ok, "recall": ok}


def gsm8k_row(rec: dict, task_id: str, where: str = "") -> dict:
    """Return one GSM8K record (question, answer with ``#### final``) as a task row."""
    for f in ("question", "answer"):
        if not isinstance(rec.get(f), str):
            raise DataError(f"{where}: missing or non-text field '{f}'")
    solution, sep, final = rec["answer"].rpartition("####")
    if not sep or not final.strip():
        raise DataError(f"{where}: field 'answer' has no final answer after '####'")
    return {"id": task_id, "question": rec["question"].strip(),
            "golden_answers": [final.strip().replace(",", "")],
            "metadata": {"solution": solution.strip(), "calculations": _CALC.findall(solution)}}


def load_gsm8k(path: str | Path, *, split: str = "all") -> list[dict]:
    """Return GSM8K-layout records as task rows (ids ``<file stem>:<line-1>``, so the problems of two files never
    share an id); ``split`` ``train`` drops the last HELD_OUT problems, ``heldout`` keeps only them, ``all`` keeps
    everything."""
    stem = Path(path).stem
    rows = [gsm8k_row(rec, f"{stem}:{n - 1}", f"{path}:{n}") for n, rec in iter_jsonl(path)]
    if not rows:
        raise DataError(f"{path}: no problems")
    if split == "train":
        return rows[:-HELD_OUT]
    if split == "heldout":
        return rows[-HELD_OUT:]
    return rows


def oracle_plan(row: dict) -> list:
    """The oracle's turns for a math problem: one turn calling the calculator on each of the reference
    solution's calculations it accepts (parallel calls), then the gold answer."""
    meta = row.get("metadata") or {}
    calls = []
    for expr in meta.get("calculations") or []:
        try:
            calculate(expr)
        except ValueError:
            continue
        calls.append({"id": f"call_{len(calls)}", "name": "calculator",
                      "arguments": json.dumps({"expression": expr.strip()})})
    golds = gold_list(row.get("golden_answers"))
    answer = Turn(content=f"<answer>{golds[0] if golds else ''}</answer>", finish_reason="stop")
    return [Turn(tool_calls=calls), answer] if calls else [answer]
