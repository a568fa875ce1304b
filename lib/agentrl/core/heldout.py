"""Held-out hygiene: the one gate every training data path passes.

A preset's held-out items (its environments' ``heldout`` splits and ``[eval] heldout_qa``: agentrl.envs.heldout
collects them) are what its evaluations report on, so no training data may contain them, under any id. A
:class:`HeldOut` holds them as ids and, for environments whose gold is the answer text (search, SQL, math), as
normalised question texts; a row matches when either matches, so a held-out question renamed ``seed_0`` is still
held out. Curation, SFT (CLI and notebook), GRPO, sampling, pair and success export, DPO and rejection-sampling SFT
each take a HeldOut and pass their rows through :meth:`HeldOut.drop`, which drops the matches, says how many in one
line, counts them for the run's manifest and stops the run when nothing is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agentrl.core.io import DataError
from agentrl.core.metrics import normalize_answer


def first_user_text(messages) -> str:
    """Return the text of the first user message of a conversation ("" without one): the question of an SFT row, a
    preference pair's prompt or a trajectory."""
    for m in messages or []:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return ""


def row_question(row: dict) -> str:
    """Return a row's question: its ``question``, else the first user message of its ``messages`` or ``prompt``."""
    question = row.get("question")
    if isinstance(question, str):
        return question
    return first_user_text(row.get("messages") or row.get("prompt"))


class HeldOut:
    """The held-out items of a preset; :meth:`drop` is the gate."""

    def __init__(self, ids: Iterable[str] = (), questions: Iterable[str] = (), *, source: str = "", items: int = 0):
        self.ids = {str(i) for i in ids}
        self.questions = {q for q in (normalize_answer(x) for x in questions) if q}
        self.source = source
        self.items = items or len(self.ids)
        self.dropped: dict[str, int] = {}

    @classmethod
    def of(cls, rows: Iterable[dict], *, by_question: Callable[[dict], bool] = lambda r: True,
           source: str = "") -> HeldOut:
        """Return the HeldOut of task ``rows``: every id, and the question of each row ``by_question`` says is
        answer-scored (a text game's question is a generated description two games may share)."""
        rows = list(rows)
        return cls((r["id"] for r in rows), (r.get("question") or "" for r in rows if by_question(r)),
                   source=source, items=len(rows))

    def matches(self, row: dict) -> bool:
        """Return True when ``row`` (a task row, trajectory, SFT row or preference pair) is a held-out item: its id
        or its normalised question is one of theirs."""
        if str(row.get("id")) in self.ids:
            return True
        return bool(self.questions) and normalize_answer(row_question(row)) in self.questions

    def drop(self, rows: list, what: str, *, row: Callable = lambda r: r) -> list:
        """Return ``rows`` without the held-out items (``row(x)`` gives the dict to match for an element ``x``),
        printing one line with the count when any is dropped and counting it under ``what`` (:meth:`describe`). A
        DataError when rows were given and none is left."""
        kept = [x for x in rows if not self.matches(row(x))]
        n = len(rows) - len(kept)
        self.dropped[what] = self.dropped.get(what, 0) + n
        source = self.source or "the preset"
        if n:
            print(f"held-out hygiene: dropped {n} of {len(rows)} {what} (held-out items of {source})")
        if rows and not kept:
            raise DataError(f"every one of the {len(rows)} {what} is a held-out item of {source}: nothing is left to "
                            "train on")
        return kept

    def describe(self) -> dict:
        """Return what a run's manifest records: how many items are held out, from where, and what was dropped."""
        return {"items": self.items, "source": self.source, "dropped": dict(self.dropped)}

    def __len__(self) -> int:
        return self.items
