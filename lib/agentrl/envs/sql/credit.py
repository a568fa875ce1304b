"""Execution credit that reading or writing the right data earns, and nothing else: shared by both SQL backends.

- A SELECT result earns exec credit (full, or the Jaccard overlap) only when it depends on the task table's data:
  the query is re-run on copies of the task's initial table (:func:`perturbed_tables`): an identical one (the result
  must be reproduced: a nondeterministic query earns nothing), one with every value changed (``scrambled``), one
  with every row twice (``duplicated``) and one with every other row (``halved``). The result must change under at
  least one of the last three: ``COUNT(*)`` changes under duplication, ``MAX(x)`` or a ``WHERE`` lookup under
  scrambling, ``COUNT(DISTINCT x)`` under halving; ``SELECT 'Paris' FROM t LIMIT 1`` under none. The credited
  values are the identical copy's, so a result read after the episode wrote its answer into the table earns nothing.
- A write task earns partial credit only for moving the table toward the gold one: the multiset Jaccard overlap
  of the final table with the expected table must exceed the initial table's (``DELETE FROM t`` does not).
- The dense ``overlap`` (:func:`overlap_credit`, the ``sql_overlap`` reward) grades a data-dependent SELECT
  against the gold statement's result: the share of the gold result's columns it selected, times 0.3 + 0.7 x the
  multiset Jaccard overlap of its rows with the gold rows on those columns. A result with any column the gold
  result does not have earns 0, so ``SELECT *`` earns nothing (unless the gold result is the whole table), and the
  right column read for every row earns 0.3 plus the share of those rows that are gold ones.
"""

from __future__ import annotations

import re
from collections import Counter

from agentrl.envs.sql.dbbench import normalize_value

VARIANTS = ("scrambled", "duplicated", "halved")
_NUMBER = re.compile(r"^\s*(-?)(\d+)(?:\.(\d*))?\s*$")


def scramble_value(value):
    """Return a different value of the same kind: a number (or numeric text) ``x`` -> ``3x + 7`` with the same
    decimals, any other text reversed with ``~`` appended (so equality and most LIKE patterns no longer hold),
    NULL stays NULL."""
    if value is None:
        return None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 3 + 7
    if isinstance(value, float):
        return value * 3 + 7.5
    text = str(value)
    m = _NUMBER.match(text)
    if m:
        sign, whole, frac = m.groups()
        if frac is None:
            return str(int(sign + whole) * 3 + 7)
        return f"{float(f'{sign}{whole}.{frac or 0}') * 3 + 7:.{len(frac)}f}"
    return text[::-1] + "~"


def perturbed_tables(table: dict) -> dict[str, dict]:
    """Return the task table as ``{"base": identical, "scrambled": ..., "duplicated": ..., "halved": ...}``
    (DB Bench table dicts: ``table_name``, ``table_info.columns``, ``table_info.rows``)."""
    info = table.get("table_info") or {}
    rows = [list(r) for r in info.get("rows") or []]

    def with_rows(new_rows: list) -> dict:
        return {**table, "table_info": {**info, "rows": new_rows}}

    return {"base": with_rows(rows),
            "scrambled": with_rows([[scramble_value(v) for v in r] for r in rows]),
            "duplicated": with_rows([r for r in rows for _ in (0, 1)]),
            "halved": with_rows(rows[::2])}


def result_key(values: list) -> Counter:
    """Return a result (flattened values) as a multiset that ignores row order: what 'the result changed' means."""
    return Counter(repr(v) for v in values)


def jaccard(a: Counter, b: Counter) -> float:
    """Return the multiset Jaccard overlap |a & b| / |a | b| (0 when both are empty)."""
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def closer_to_gold(initial: Counter | None, final: Counter | None, expected: Counter | None) -> bool:
    """Return True when the final table overlaps the expected one more than the initial table did."""
    if initial is None or final is None or expected is None:
        return False
    return jaccard(final, expected) > jaccard(initial, expected)


def progress(initial: Counter | None, final: Counter | None, expected: Counter | None) -> float:
    """Return how far the table moved from the initial toward the expected one, 0..1 (Jaccard overlap, rescaled so
    that doing nothing earns 0)."""
    if initial is None or final is None or expected is None:
        return 0.0
    start = jaccard(initial, expected)
    return max(0.0, (jaccard(final, expected) - start) / (1 - start)) if start < 1 else 0.0


def column_key(name: str) -> str:
    """Return a result column's name as the overlap compares it: lower-case, without quotes, backticks, brackets or
    spaces (``"Nation"``, `` `nation` `` and ``nation`` are one column)."""
    return re.sub(r"[\s\"`\[\]]", "", str(name)).lower()


def overlap_credit(columns: list[str], rows: list[tuple], gold_columns: list[str], gold_rows: list[tuple]) -> float:
    """Return the dense credit (module docstring) of a result (``columns``, ``rows``) against the gold statement's
    result: 0 when it has a column the gold result lacks, a repeated column, or no column of it; else the share of the
    gold columns it has x (0.3 + 0.7 x the multiset Jaccard overlap of the rows on those columns)."""
    pred, gold = [column_key(c) for c in columns], [column_key(c) for c in gold_columns]
    if not pred or len(set(pred)) != len(pred) or not set(pred) <= set(gold):
        return 0.0
    shared = [c for c in dict.fromkeys(gold) if c in pred]
    mine, theirs = [pred.index(c) for c in shared], [gold.index(c) for c in shared]
    a = Counter(tuple(normalize_value(r[i]) for i in mine) for r in rows)
    b = Counter(tuple(normalize_value(r[i]) for i in theirs) for r in gold_rows)
    return len(shared) / len(set(gold)) * (0.3 + 0.7 * jaccard(a, b))
