"""Answer metrics, FlashRAG- and HotpotQA-compatible.

Normalisation is SQuAD's (lower case, drop punctuation, drop articles, squash whitespace). Each metric is
the maximum over the gold answers (precision and recall maximised separately, as FlashRAG does).
``yes`` / ``no`` / ``noanswer`` only ever match exactly, as in the HotpotQA official scorer.

Example: gold ``["Tim Burton"]``, prediction ``"It was directed by Tim Burton."`` ->
``{"em": 0.0, "f1": 0.571, "precision": 0.4, "recall": 1.0, "acc": 1.0}``.
"""

from __future__ import annotations

import logging
import re
import string
import threading
from collections import Counter
from collections.abc import Iterable, Sequence

# SQuAD deletes the characters of string.punctuation one by one; one regex pass deletes the same characters ~6x
# faster than str.translate on non-ASCII text (1.6 kB of passages: 16 vs 100 us; the runner's `grounded` metric
# normalises every passage an episode read)
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")
METRICS = ("em", "f1", "precision", "recall", "acc")


def normalize_answer(s: str) -> str:
    """Return the SQuAD/HotpotQA normal form of an answer string."""
    s = _PUNCT.sub("", str(s).lower())
    return " ".join(_ARTICLES.sub(" ", s).split())


def f1_parts(prediction: str, gold: str) -> tuple[float, float, float]:
    """Return ``(f1, precision, recall)`` of one prediction against one gold answer (HotpotQA definition)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def contains_answer(prediction: str, gold: str) -> bool:
    """Return True when the normalised gold answer occurs in the normalised prediction (yes/no only exactly).

    Plain substring containment, as FlashRAG's ``acc`` (Sub_ExactMatch) computes it.
    """
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if ref in _SPECIAL or pred in _SPECIAL:
        return pred == ref
    return bool(ref) and ref in pred


def gold_list(golds, field: str = "golden_answers") -> list[str]:
    """Return the gold answers as a list of strings: a bare string is ONE answer, None is no answer.

    Raises ValueError naming ``field`` (and the index) for anything else than strings: nested lists, numbers,
    None inside the list, dicts. Iterating a bare string would score it character by character, and ``str()``
    of a nested list or of None would invent answers such as "['a']" or "None".
    """
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    if not isinstance(golds, list | tuple):
        raise ValueError(f"field '{field}' must be a string or a list of strings, got {type(golds).__name__}")
    for i, g in enumerate(golds):
        if not isinstance(g, str):
            raise ValueError(f"field '{field}'[{i}] must be a string, got {type(g).__name__} ({g!r:.60}); "
                             "quote numbers and flatten nested lists")
    return list(golds)


def answer_metrics(prediction: str | None, golds: str | Sequence[str] | None) -> dict[str, float]:
    """Return em, f1, precision, recall and acc of ``prediction`` against the gold answers (max over gold).

    ``golds`` is a list of strings or one bare string (one answer); anything else raises ValueError.
    """
    out = dict.fromkeys(METRICS, 0.0)
    golds = gold_list(golds)
    if prediction is None:
        return out
    for gold in golds:
        f1, p, r = f1_parts(prediction, gold)
        out["f1"], out["precision"], out["recall"] = max(out["f1"], f1), max(out["precision"], p), max(out["recall"], r)
        out["em"] = max(out["em"], float(normalize_answer(prediction) == normalize_answer(gold)))
        out["acc"] = max(out["acc"], float(contains_answer(prediction, gold)))
    return out


def math_equal(prediction: str | None, gold: str) -> bool:
    """Return True when ``prediction`` equals ``gold`` by math-verify (False for no or an over-long answer)."""
    if not prediction or not prediction.strip() or len(prediction) > 1000:
        return False
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which exists in the main thread only
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    if timeout is None:  # off on purpose (as in TRL's accuracy reward): not a warning per thread to the reader
        logging.getLogger("math_verify").setLevel(logging.ERROR)
    text = re.sub(r"(?<=\d),(?=\d{3})", "", prediction.strip())  # 1,200 -> 1200
    target = parse(f"${gold}$", parsing_timeout=timeout)
    # plain text first ("72 clips"), then as a LaTeX formula (a bare "3/4")
    for candidate in (text, f"${text}$"):
        got = parse(candidate, parsing_timeout=timeout)
        if got and verify(target, got, timeout_seconds=timeout):
            return True
    return False


def aggregate(records: Iterable[dict], by: Sequence[str] = ("type", "level")) -> dict:
    """Return mean metrics over trajectory records, overall and broken down by metadata fields.

    Records carry ``metrics`` (dict) and ``metadata``; a metric's mean is over the records that carry it (an MCP
    task without a final-state check has no ``state``, a mixture's math episode no ``sql_exec``) and the errored
    records, which count as zeros and are also counted separately.
    """
    records = list(records)
    keys = sorted({k for r in records for k, v in (r.get("metrics") or {}).items() if isinstance(v, int | float)})
    errors = sum(1 for r in records if r.get("error"))
    out: dict = {"n": len(records), "errors": errors, "overall": _means(records, keys)}
    for field in by:
        groups: dict[str, list[dict]] = {}
        for r in records:
            value = (r.get("metadata") or {}).get(field)
            if isinstance(value, str | int | bool):
                groups.setdefault(str(value), []).append(r)
        if groups:
            out[f"by_{field}"] = {g: {"n": len(rs), **_means(rs, keys)} for g, rs in sorted(groups.items())}
    return out


FORMAT_ERRORS = ("unknown_tool", "invalid_arguments", "invalid_tool_call")


def tool_call_quality(records: Iterable[dict]) -> dict[str, float]:
    """Return how well trajectories call tools.

    ``episodes_with_wellformed_call``: share of episodes with at least one call of an existing tool with
    valid arguments (the headline before/after SFT); ``wellformed_call_share``: share of all calls without a
    format error; ``episodes_with_call``: share of episodes with any call; ``mean_calls`` per episode.
    """
    records = [r for r in records if not r.get("error")]
    if not records:
        return {"episodes_with_wellformed_call": 0.0, "wellformed_call_share": 0.0, "episodes_with_call": 0.0,
                "mean_calls": 0.0}
    calls = good = with_call = with_good = 0
    for r in records:
        tool_msgs = [m for m in r.get("messages") or [] if m.get("role") == "tool"]
        ok = [m for m in tool_msgs if m.get("error") not in FORMAT_ERRORS]
        calls, good = calls + len(tool_msgs), good + len(ok)
        with_call += bool(tool_msgs)
        with_good += bool(ok)
    n = len(records)
    return {"episodes_with_wellformed_call": round(with_good / n, 4),
            "wellformed_call_share": round(good / calls, 4) if calls else 0.0,
            "episodes_with_call": round(with_call / n, 4), "mean_calls": round(calls / n, 4)}


def _means(records: list[dict], keys: list[str]) -> dict[str, float]:
    if not records:
        return {}
    out = {}
    for k in keys:
        rows = [r for r in records if r.get("error") or k in (r.get("metrics") or {})]
        if rows:
            out[k] = round(sum(float((r.get("metrics") or {}).get(k) or 0.0) for r in rows) / len(rows), 4)
    return out
