"""DB Bench tasks (AgentBench's SQL benchmark) as task rows, the lenient answer rules, and the oracle's plan."""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from pathlib import Path

from agentrl.core.io import DataError, iter_jsonl

SELECT_TYPES = {"other", "counting", "comparison", "ranking", "aggregation-SUM", "aggregation-MAX",
                "aggregation-MIN", "aggregation-AVG"}


def normalize_value(v) -> str:
    """Return a comparable form of a value: lower-case text, numbers canonical (1.0 == 1), NULL/empty as "none".

    Text that parses to an infinite or NaN float ("1e999") stays text: ``int(inf)`` would raise inside a
    reward call."""
    if v is None:
        return "none"
    s = str(v).strip().strip("'\"").strip()
    if not s or s.lower() in ("none", "null"):
        return "none"
    try:
        f = float(s.replace(",", "")) if re.fullmatch(r"-?[\d,]*\.?\d+(e-?\d+)?", s, re.I) else None
    except ValueError:
        f = None
    if f is not None and math.isfinite(f):
        return repr(round(f, 6)).rstrip("0").rstrip(".") if f != int(f) else str(int(f))
    return " ".join(s.lower().split())


def values_match(got: list, label: list) -> bool:
    """Return True when two value lists are equal as multisets of normalised values ("none" = nothing)."""
    a = Counter(normalize_value(v) for v in got) - Counter({"none": 10**9})
    b = Counter(normalize_value(v) for v in label) - Counter({"none": 10**9})
    return a == b


def answer_matches(answer: str | None, label: list) -> bool:
    """Return True when an ``<answer>`` text gives the label values (a JSON/Python list, split on ", ", or as one
    joined string)."""
    if answer is None:
        return False
    text = answer.strip()
    if text.startswith("[") and text.endswith("]"):  # several values as a list, as the prompt asks

        try:
            values = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            values = None
        if isinstance(values, list) and values_match([v[0] if isinstance(v, tuple) and v else v for v in values],
                                                     label):
            return True
    parts = [p for p in (x.strip() for x in answer.split(", ")) if p] or [""]
    if values_match(parts, label):
        return True
    return normalize_value(answer) == normalize_value(", ".join(str(x) for x in label))


def dbbench_row(rec: dict, task_id: str, where: str = "") -> dict:
    """Return one DB Bench record as a task row (question = description + table note, kind select/modify)."""
    for field in ("description", "label", "table", "type"):
        if field not in rec:
            raise DataError(f"{where}: missing field '{field}'")
    kind = "select" if set(rec["type"]) <= SELECT_TYPES else "modify"
    gold = (rec.get("sql") or {}).get("query") if kind == "select" else (rec["label"] or [None])[0]
    question = f"{rec['description'].strip()}\n{rec.get('add_description', '').strip()}".strip()
    return {"id": task_id, "question": question,
            "golden_answers": [str(x) for x in rec["label"]] if kind == "select" else ["done"],
            "metadata": {"kind": kind, "type": rec["type"][0], "types": rec["type"], "table": rec["table"],
                         "sql": gold, "label": rec["label"] if kind == "select" else [], "source": rec.get("source"),
                         "answer_md5": rec.get("answer_md5")}}


def load_dbbench(path: str | Path) -> list[dict]:
    """Return the tasks of a DB Bench-format JSONL file as task rows, ids by line: ``db_0``, ``db_1``, ... for
    AgentBench's dev set (``dbbench_dev.jsonl``, its own numbering), ``<file stem>_0``, ... for any other file, so two
    files' tasks never share an id (the held-out gate matches by id)."""
    stem = Path(path).stem
    prefix = "db_" if stem == "dbbench_dev" else f"{stem}_"
    rows = [dbbench_row(rec, f"{prefix}{lineno - 1}", f"{path}:{lineno}") for lineno, rec in iter_jsonl(path)]
    if not rows:
        raise DataError(f"{path}: no tasks")
    return rows
