"""AgentBench DB Bench scoring, rule for rule, so the numbers we report compare with AgentBench's.

Ported from THUDM/AgentBench ``src/server/tasks/dbbench/result_processor.py`` (``DBResultProcessor``) and the
answer check of ``task.py`` (``DBBenchTask.start_sample``), step by step and in the same order:

- ``_clean_mysql_result``: a text that starts with ``[`` and ends with ``]`` (not stripped first) is evaluated; a
  list whose items are all tuples gives the first value of each one-value tuple (tuples of other lengths are
  dropped: ``[('x',), ('y', 'z')]`` -> ``['x']``, ``[(1, 2)]`` -> ``[]``). Otherwise, when the text without its
  outer brackets is one tuple ending in ``,)`` (``[(Paris,)]``, which does not evaluate), its inside is the value.
- ``_clean_answer``: None -> ``["0"]``; a MySQL-shaped result as above; else a stripped text that looks like a
  list is evaluated: a list gives one value per item (one-value tuples unpacked), a text that does not evaluate is
  split on commas outside quotes, and anything else that evaluates (``[5][0]`` is 5) gives no list at all, which
  ``compare_results`` counts as wrong; any other text is one value; a Python list or tuple (the label) one value
  per item. Every value: quotes and whitespace stripped, ``_normalize_special_values`` applied (a trailing ``%``
  dropped, thousands commas removed, None/null/undefined/nan/inf/"" -> ``"0"``).
- ``compare_results`` (SELECT): one value each: both ``"0"``, or floats within 1e-2, or equal strings (case
  matters). Several: when every value on both sides is a float, equal lengths and a one-to-one match within 1e-2;
  otherwise set equality. Any exception: wrong.
- INSERT/UPDATE/DELETE: the table hash ``md5(group_concat(rowhash ORDER BY rowhash))`` over
  ``substring(md5(concat_ws(',', cols)), 1, 5)`` (NULLs skipped by concat_ws; ``group_concat`` cut at MySQL's
  ``group_concat_max_len`` of 1024 characters; an empty table hashes to NULL, read as ``"None"``), compared with
  ``answer_md5`` by ``compare_results`` (both cleaned, then equal).

The one deliberate difference: AgentBench runs ``eval`` on the model's text. Here :func:`safe_eval` evaluates
Python literals exactly as ``ast.literal_eval`` does, plus the operators eval would apply to them (subscripts,
slices, arithmetic, comparisons, ``and``/``or``/``not``, conditional expressions; sizes bounded), so ``[5][0]``
and ``[1] + [2]`` give eval's results. Names and calls are never looked up or run: they count as a text that does
not evaluate (eval raises NameError for every name but Python's builtins and AgentBench's own locals).

Example: ``compare_results('["1,234", "5%"]', ["5", "1234"])`` -> True (set equality after cleaning);
``compare_results("Paris", ["paris"])`` -> False (case-sensitive); ``compare_results("[(Paris,)]", ["Paris"])``
-> True (the single-tuple fallback).
"""

from __future__ import annotations

import ast
import hashlib
import math
import operator

_SPECIAL = {"none": "0", "null": "0", "undefined": "0", "nan": "0", "inf": "0", "infinity": "0", "-inf": "0",
            "-infinity": "0", "": "0"}
GROUP_CONCAT_MAX_LEN = 1024  # MySQL 8's default group_concat_max_len, which AgentBench's hash query runs under


class _NotEvaluated(ValueError):
    """The text is not something :func:`safe_eval` evaluates (AgentBench's eval would raise, or run code)."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
MAX_EVAL_SIZE = 100_000  # longest sequence / widest integer (bits) an operator may build: eval's answer, not a DoS


def _bounded(value):
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_EVAL_SIZE:
        raise _NotEvaluated("integer too large")
    if isinstance(value, str | bytes | list | tuple) and len(value) > MAX_EVAL_SIZE:
        raise _NotEvaluated("sequence too long")
    return value


def _binary(op: ast.operator, a, b):
    # refuse before computing what would not fit: 10**10**10 or 'x' * 10**9 must not run
    if isinstance(op, ast.Pow) and isinstance(a, int) and isinstance(b, int) and b > 0 \
            and abs(a) > 1 and b * max(abs(a).bit_length(), 1) > MAX_EVAL_SIZE:
        raise _NotEvaluated("power too large")
    if isinstance(op, ast.LShift) and isinstance(b, int) and b > MAX_EVAL_SIZE:
        raise _NotEvaluated("shift too large")
    if isinstance(op, ast.Mult):
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, str | bytes | list | tuple) and isinstance(n, int) and len(seq) * max(n, 0) > \
                    MAX_EVAL_SIZE:
                raise _NotEvaluated("repetition too long")
    return _bounded(_BINARY[type(op)](a, b))


def _eval_node(node: ast.AST):
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_eval_node(e) for e in node.elts]
        return _bounded({ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items))
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _NotEvaluated("dict unpacking")
        return {_eval_node(k): _eval_node(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_eval_node(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _binary(node.op, _eval_node(node.left), _eval_node(node.right))
    if isinstance(node, ast.BoolOp):
        value = None
        for e in node.values:  # short-circuits as eval does
            value = _eval_node(e)
            if bool(value) is isinstance(node.op, ast.Or):
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval_node(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval_node(right_node)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval_node(node.body) if _eval_node(node.test) else _eval_node(node.orelse)
    if isinstance(node, ast.Subscript):
        return _eval_node(node.value)[_eval_node(node.slice)]
    if isinstance(node, ast.Slice):
        return slice(*(None if p is None else _eval_node(p) for p in (node.lower, node.upper, node.step)))
    raise _NotEvaluated(type(node).__name__)  # Name, Call, Attribute, comprehensions, lambdas, f-strings, ...


def safe_eval(text: str):
    """Return what Python's ``eval`` gives for ``text`` when that is a literal or an operator applied to literals
    (see the module docstring); raise an exception where eval would raise or would have to look a name up or run a
    call. Leading spaces and tabs are ignored, as eval ignores them."""
    tree = ast.parse(text.lstrip(" \t"), mode="eval")
    return _eval_node(tree)


def _normalize_special_values(value) -> str:
    if value is None:
        return "0"
    str_value = str(value).strip()
    if str_value.endswith("%"):
        return str_value[:-1].strip()  # AgentBench returns here: a percentage keeps its commas, is no special value
    if "," in str_value and not str_value.startswith("[") and not str_value.endswith("]"):
        str_value = str_value.replace(",", "")
    return _SPECIAL.get(str_value.lower(), str_value)


def _strip_value(value) -> str:
    return str(value).strip().strip("'\"")


def _clean_mysql_result(result) -> list[str] | None:
    """AgentBench's ``_clean_mysql_result``: the values of a MySQL-result-shaped text, or None."""
    if not (isinstance(result, str) and result.startswith("[") and result.endswith("]")):
        return None
    try:
        parsed = safe_eval(result)
        if isinstance(parsed, list) and all(isinstance(item, tuple) for item in parsed):
            # one-value tuples only: AgentBench drops the others (and an empty list is an empty result)
            return [_strip_value(item[0]) for item in parsed if len(item) == 1]
    except Exception:  # noqa: BLE001 - AgentBench's bare except: fall through to the single-tuple reading
        pass
    stripped = result.strip("[]")
    if stripped.count("(") == 1 and stripped.startswith("(") and stripped.endswith(",)"):
        return [stripped[1:-2].strip().strip("'\"")]
    return None


def _split_list_text(text: str) -> list[str]:
    """AgentBench's fallback for a list-looking text that does not evaluate: split on commas outside quotes."""
    items, current, in_quotes = [], "", False
    for char in text[1:-1]:
        if char in "\"'":
            in_quotes = not in_quotes
        elif char == "," and not in_quotes:
            if current:
                items.append(_normalize_special_values(current.strip().strip("'\"")))
                current = ""
        else:
            current += char
    if current:
        items.append(_normalize_special_values(current.strip().strip("'\"")))
    return items


def _item(item) -> str:
    if isinstance(item, tuple) and len(item) == 1:
        item = item[0]
    return _normalize_special_values(_strip_value(item))


def clean_answer(answer) -> list[str] | None:
    """Return the answer as AgentBench's ``_clean_answer`` does: a list of normalised value strings, or None where
    AgentBench's function returns nothing (a list-looking text that evaluates to something other than a list)."""
    if answer is None:
        return ["0"]
    mysql = _clean_mysql_result(answer)
    if mysql is not None:
        return [_normalize_special_values(x) for x in mysql]
    if isinstance(answer, str):
        text = answer.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return [_normalize_special_values(text.strip("'\""))]
        try:
            parsed = safe_eval(text)
        except Exception:  # noqa: BLE001 - AgentBench's bare except: split the text by hand
            return _split_list_text(text)
        return [_item(x) for x in parsed] if isinstance(parsed, list) else None
    if isinstance(answer, list | tuple):
        return [_item(x) for x in answer]
    return [_normalize_special_values(_strip_value(answer))]


def _is_float(value) -> bool:
    try:
        float(value)
    except (ValueError, TypeError):
        return False
    return True


def _float_equal(a, b, tol: float = 1e-2) -> bool:
    try:
        return abs(float(a) - float(b)) <= tol  # nan never compares equal, as in AgentBench
    except (ValueError, TypeError):
        return False


def compare_results(answer, ground_truth, query_type: str = "SELECT") -> bool:
    """Return AgentBench's verdict for an answer against its ground truth (see the module docstring): for a SELECT
    task the ``<answer>`` against the label, for INSERT/UPDATE/DELETE the table hash against ``answer_md5``."""
    try:
        got, want = clean_answer(answer), clean_answer(ground_truth)
        if query_type in ("INSERT", "DELETE", "UPDATE"):
            return got == want
        if len(got) == 1 and len(want) == 1:  # len(None) raises: wrong, as in AgentBench
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
    except Exception:  # noqa: BLE001 - AgentBench counts any failure to compare as wrong
        return False


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
    """Return AgentBench's table hash over ``rows`` (tuples in column order); None for an empty table (MySQL's
    NULL). The sorted row hashes are joined and cut at ``group_concat_max_len`` characters, as MySQL does."""
    hashes = sorted(hashlib.md5(",".join(t for t in map(mysql_text, row) if t is not None)
                                .encode("utf-8", "replace")).hexdigest()[:5] for row in rows)
    if not hashes:
        return None
    return hashlib.md5(",".join(hashes)[:GROUP_CONCAT_MAX_LEN].encode()).hexdigest()


def hash_answer(digest: str | None) -> str:
    """Return the table hash as AgentBench's ``calculate_tables_hash_async`` passes it on: the digest, or
    ``"None"`` for an empty table (``str([(None,)])`` cut down to its first value)."""
    return "None" if digest is None else digest


def modify_correct(digest: str | None, answer_md5) -> bool:
    """Return AgentBench's verdict on an INSERT/UPDATE/DELETE task: the final table's hash (``digest``, None for an
    empty table) against the task's ``answer_md5`` (or a hash computed from the gold statement)."""
    return compare_results(hash_answer(digest), answer_md5, "UPDATE")


def has_answer_md5(answer_md5) -> bool:
    """Return True when a task carries an ``answer_md5`` to score against (AgentBench computes the expected hash
    from the gold statement when the field is empty)."""
    return isinstance(answer_md5, str) and bool(answer_md5.strip())


def expected_hash(answer_md5) -> str | None:
    """Return the hash inside a DB Bench ``answer_md5`` field (``"[('<md5>',)]"``), or None when it holds none."""
    if not has_answer_md5(answer_md5):
        return None
    try:
        parsed = ast.literal_eval(answer_md5.strip())
    except (ValueError, SyntaxError):
        return None
    while isinstance(parsed, list | tuple) and len(parsed) == 1:
        parsed = parsed[0]
    return parsed if isinstance(parsed, str) else None
