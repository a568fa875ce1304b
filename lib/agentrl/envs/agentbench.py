"""AgentBench DB Bench scoring, rule for rule, so the numbers we report compare with AgentBench's.

Ported from THUDM/AgentBench ``src/server/tasks/dbbench/result_processor.py`` (``DBResultProcessor``):

- SELECT tasks: ``compare_results(answer, label)``. Both sides are cleaned into lists of strings: a text that
  looks like a list (``["a", "b"]``, ``[('a',), ('b',)]``) is parsed into its items, any other text is one
  value; quotes and whitespace are stripped, a trailing ``%`` dropped, thousands commas removed, and
  None/null/undefined/nan/inf/"" become ``"0"``. One value each: equal within 1e-2 when both parse as floats,
  else case-sensitive string equality. Several values: when every value on both sides is a float, equal
  lengths and a one-to-one match within 1e-2; otherwise set equality.
- INSERT/UPDATE/DELETE tasks: the table hash ``md5(group_concat(substring(md5(concat_ws(',', cols)), 1, 5)
  ORDER BY ...))`` (NULL values skipped by concat_ws, no row: NULL) against the task's ``answer_md5``.

One deliberate difference: AgentBench parses list-looking answers with ``eval``; here ``ast.literal_eval``
parses the same literals and never runs model text.

Example: ``compare_results('["1,234", "5%"]', ["5", "1234"])`` -> True (set equality after cleaning);
``compare_results("Paris", ["paris"])`` -> False (case-sensitive).
"""

from __future__ import annotations

import ast
import hashlib
import math

_SPECIAL = {"none", "null", "undefined", "nan", "inf", "infinity", "-inf", "-infinity", ""}


def _normalize(value) -> str:
    if value is None:
        return "0"
    s = str(value).strip()
    if s.endswith("%"):
        return s[:-1].strip()  # AgentBench returns here: a percentage keeps its commas and is no special value
    if "," in s and not s.startswith("[") and not s.endswith("]"):
        s = s.replace(",", "")
    return "0" if s.lower() in _SPECIAL else s


def _item(item) -> str:
    if isinstance(item, tuple) and len(item) == 1:
        item = item[0]
    return _normalize(str(item).strip().strip("'\""))


def _split_list_text(text: str) -> list[str]:
    """AgentBench's fallback for a list-looking text its parser rejects: split on commas outside quotes."""
    items, current, in_quotes = [], "", False
    for char in text[1:-1]:
        if char in "\"'":
            in_quotes = not in_quotes
        elif char == "," and not in_quotes:
            if current:
                items.append(_normalize(current.strip().strip("'\"")))
                current = ""
        else:
            current += char
    if current:
        items.append(_normalize(current.strip().strip("'\"")))
    return items


def clean_answer(answer) -> list[str]:
    """Return the answer as AgentBench's ``_clean_answer`` does: a list of normalised value strings."""
    if answer is None:
        return ["0"]
    if isinstance(answer, str):
        text = answer.strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return _split_list_text(text)
            if isinstance(parsed, list):
                return [_item(x) for x in parsed]
            return _split_list_text(text)
        return [_normalize(text.strip("'\""))]
    if isinstance(answer, list | tuple):
        return [_item(x) for x in answer]
    return [_normalize(str(answer).strip().strip("'\""))]


def _is_float(value: str) -> bool:
    try:
        float(value)
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _float_equal(a: str, b: str, tol: float = 1e-2) -> bool:
    try:
        diff = abs(float(a) - float(b))
    except (ValueError, TypeError, OverflowError):
        return False
    return diff <= tol  # nan never compares equal, as in AgentBench


def compare_results(answer, ground_truth) -> bool:
    """Return AgentBench's verdict for a SELECT task's answer against its label (see the module docstring)."""
    try:
        got, want = clean_answer(answer), clean_answer(ground_truth)
    except Exception:  # noqa: BLE001 - AgentBench counts any failure to compare as wrong
        return False
    if len(got) == 1 and len(want) == 1:
        a, b = got[0], want[0]
        if a == "0" and b == "0":
            return True
        if _is_float(a) and _is_float(b):
            return _float_equal(a, b)
        return a == b
    if all(_is_float(x) for x in got) and all(_is_float(x) for x in want):
        if len(got) != len(want):
            return False
        used = [False] * len(want)
        for a in got:
            for i, b in enumerate(want):
                if not used[i] and _float_equal(a, b):
                    used[i] = True
                    break
            else:
                return False
        return all(used)
    return set(got) == set(want)


def mysql_text(value) -> str | None:
    """Return a value as MySQL's ``CONCAT_WS`` renders it from a TEXT column (None stays None: skipped)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def table_hash(rows) -> str | None:
    """Return AgentBench's table hash over ``rows`` (tuples in column order); None for an empty table."""
    hashes = sorted(hashlib.md5(",".join(t for t in map(mysql_text, row) if t is not None).encode("utf-8",
                                                                                                  "replace"))
                    .hexdigest()[:5] for row in rows)
    if not hashes:
        return None
    return hashlib.md5(",".join(hashes).encode()).hexdigest()


def expected_hash(answer_md5) -> str | None:
    """Return the hash inside a DB Bench ``answer_md5`` field (``"[('<md5>',)]"``), or None when it holds none."""
    if not isinstance(answer_md5, str) or not answer_md5.strip():
        return None
    try:
        parsed = ast.literal_eval(answer_md5.strip())
    except (ValueError, SyntaxError):
        return None
    while isinstance(parsed, list | tuple) and len(parsed) == 1:
        parsed = parsed[0]
    return parsed if isinstance(parsed, str) else None
