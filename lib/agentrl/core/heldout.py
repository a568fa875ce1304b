"""Held-out hygiene: the one gate every training data path passes.

A preset's held-out items (its environments' ``heldout`` splits and ``[eval] heldout_qa``: agentrl.envs.heldout
collects them) are what its evaluations report on, so no training data may contain them. An item is known by its
content, what the model reads of it (its environment says which text: agentrl.envs.registry.Environment.identity),
never by an ``id`` or a ``question`` field that a file may carry or lose. Two lines of defence, both in :meth:`keep`:

1. **Identity.** A training row (a trajectory, an SFT row, a preference pair, a task row) is a held-out item when its
   text, every message of it as the model would read it, contains a held-out item's identity: normalised (case,
   punctuation, articles, whitespace) and as a whole run of words, so a prefix ("Question: ...") or a wrapper does not
   hide it. An identity shorter than :data:`MIN_CONTAINED` words must equal a whole message or line instead (a short
   text inside a longer one is another question).
2. **Near copies.** A row that holds at least :data:`NEAR_SHARE` of the distinct :data:`NGRAM`-grams of a held-out
   item (the 13-gram overlap of contamination studies, GPT-3 §C; n-grams several held-out items share, a template's,
   left out) is a near copy: dropped too, counted per path in the run's manifest, and the run is refused when they are
   more than :data:`MAX_NEAR` of its rows (a source that carries that many is mixing held-out items in).

Curation, export (every format), SFT (CLI and notebook), GRPO, sampling, pair and success export, DPO and
rejection-sampling SFT each pass their rows through :meth:`HeldOut.keep` (or :meth:`HeldOut.drop`), which says in one
line what it dropped and stops the run when nothing is left.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable

from agentrl.core.io import DataError
from agentrl.core.metrics import normalize_answer

MIN_CONTAINED = 4  # an identity of this many words or more is found inside a longer text
NGRAM = 13  # words per n-gram of the near-copy check
NEAR_SHARE = 0.5  # a row holding this share of a held-out item's n-grams is a near copy of it
MAX_NEAR = 0.01  # more near copies than this share of a path's rows stops the run
CONTENT_FIELDS = ("messages", "prompt", "chosen", "rejected")  # a trajectory's or SFT row's, a preference pair's


def _text(content) -> str:
    """Return a message content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def texts(row: dict) -> list[str]:
    """Return the texts a training path shows the model of ``row``: each message's content and tool-call arguments
    (``messages`` of a trajectory or SFT row, a preference pair's ``prompt`` / ``chosen`` / ``rejected``: message
    lists, which every training path requires); a task row's ``question`` only when it has none of these (then its
    question is what the model reads)."""
    out: list[str] = []
    for key in CONTENT_FIELDS:
        value = row.get(key)
        if isinstance(value, list):
            for m in value:
                if not isinstance(m, dict):
                    continue
                out.append(_text(m.get("content")))
                for call in m.get("tool_calls") or []:
                    args = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                    out.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if not any(key in row for key in CONTENT_FIELDS):
        out.append(row.get("question") if isinstance(row.get("question"), str) else "")
    return [t for t in out if t]


def words(text: str) -> tuple[str, ...]:
    """Return the normalised words of ``text`` (SQuAD normalisation: lower case, no punctuation or articles)."""
    return tuple(normalize_answer(text).split())


def _grams(tokens: tuple[str, ...], n: int) -> set[tuple[str, ...]]:
    return {tokens[i:i + n] for i in range(len(tokens) - n + 1)}


class HeldOut:
    """The held-out items of a preset as the texts the model reads of them; :meth:`drop` is the gate.

    ``items`` are the identities (agentrl.envs.heldout builds them from the environments' rows); ``near`` the
    identities whose near copies count (default: all; an environment whose items are generated from a template that
    distinct items share, the text game, has none)."""

    def __init__(self, items: Iterable[str] = (), *, source: str = "", near: Iterable[str] | None = None):
        items = list(items)
        self.items = len(items)
        self.source = source
        self.dropped: dict[str, int] = {}
        self.near_copies: dict[str, int] = {}
        self._long: dict[tuple[str, ...], list[tuple[str, ...]]] = {}  # first words -> identities starting so
        self._short: set[tuple[str, ...]] = set()
        for ident in {w for w in (words(x) for x in items) if w}:
            if len(ident) >= MIN_CONTAINED:
                self._long.setdefault(ident[:MIN_CONTAINED], []).append(ident)
            else:
                self._short.add(ident)
        grams = [g for g in (_grams(words(x), NGRAM) for x in (items if near is None else near)) if g]
        shared = Counter(g for item in grams for g in item)
        self._grams: dict[tuple[str, ...], list[int]] = {}  # n-gram -> the held-out items holding it
        self._sizes: list[int] = []
        for item in grams:
            own = [g for g in item if shared[g] == 1]  # a template's n-grams (several items hold them) say nothing
            for g in own:
                self._grams.setdefault(g, []).append(len(self._sizes))
            self._sizes.append(len(own))

    def matches(self, row: dict) -> bool:
        """Return True when ``row`` contains a held-out item (the first line: its identity, module doc)."""
        found = [words(t) for t in texts(row)]
        if self._short and any(w in self._short for w in found):
            return True
        if self._short and any(words(line) in self._short for t in texts(row) for line in t.splitlines()):
            return True
        for w in found:
            for i in range(len(w) - MIN_CONTAINED + 1):
                for ident in self._long.get(w[i:i + MIN_CONTAINED], ()):
                    if w[i:i + len(ident)] == ident:
                        return True
        return False

    def near(self, row: dict) -> bool:
        """Return True when ``row`` holds at least NEAR_SHARE of the n-grams of a held-out item (the second line)."""
        if not self._grams:
            return False
        hits: Counter = Counter()
        for t in texts(row):
            for g in _grams(words(t), NGRAM):
                hits.update(self._grams.get(g, ()))
        return any(n >= NEAR_SHARE * self._sizes[item] for item, n in hits.items())

    def keep(self, rows: Iterable, what: str, *, row: Callable = lambda r: r) -> list[bool]:
        """Return, for each of ``rows`` (an iterable: read once, not held), whether it passes the gate: neither a
        held-out item nor a near copy of one (``row(x)`` gives the dict to read for an element ``x``). Prints one
        line with the counts when any is dropped and counts them under ``what`` (:meth:`describe`); a DataError
        when the near copies are more than MAX_NEAR of the rows, or when rows were given and none is left."""
        verdicts, held, copies, example = [], 0, 0, ""
        for x in rows:
            r = row(x)
            if self.matches(r):
                held += 1
                verdicts.append(False)
            elif self.near(r):
                copies += 1
                example = example or next(iter(texts(r)), "")[:120]
                verdicts.append(False)
            else:
                verdicts.append(True)
        n, source = len(verdicts), self.source or "the preset"
        self.dropped[what] = self.dropped.get(what, 0) + held
        self.near_copies[what] = self.near_copies.get(what, 0) + copies
        if held or copies:
            print(f"held-out hygiene: dropped {held} of {n} {what} (held-out items of {source})"
                  + (f" and {copies} near copies of them ({NEAR_SHARE:.0%} of an item's {NGRAM}-grams)"
                     if copies else ""))
        if copies > MAX_NEAR * n:
            raise DataError(f"{copies} of the {n} {what} are near copies of held-out items of {source} (they hold "
                            f"{NEAR_SHARE:.0%} of an item's {NGRAM}-grams; at most {MAX_NEAR:.0%} of the rows may), "
                            f"e.g. {example!r}: the data mixes in held-out items; nothing was trained")
        if n and not any(verdicts):
            raise DataError(f"every one of the {n} {what} is a held-out item of {source}: nothing is left to "
                            "train on")
        return verdicts

    def drop(self, rows: list[dict], what: str) -> list[dict]:
        """Return ``rows`` without the held-out items and their near copies (:meth:`keep` says which, counts them
        and stops the run when it must)."""
        return [x for x, ok in zip(rows, self.keep(rows, what), strict=True) if ok]

    def describe(self) -> dict:
        """Return what a run's manifest records: how many items are held out, from where, and what was dropped (held-out
        items and near copies, per path)."""
        return {"items": self.items, "source": self.source, "dropped": dict(self.dropped),
                "near_copies": dict(self.near_copies)}

    def __len__(self) -> int:
        return self.items
