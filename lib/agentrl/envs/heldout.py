"""A preset's held-out set: what every training path's gate (agentrl.core.heldout.HeldOut) drops.

Held out are every registered environment's ``heldout`` split, with the settings the preset gives that environment
in any run table (``[eval.search]``, ``[grpo.sql]``, a mixture's members; each table's split when several do), else
its defaults, and every row of ``[eval] heldout_qa`` (an evaluation-only file, MultiHop-RAG's validation-200). An
environment whose default rows cannot be read here (search without any QA file, the text game without Java) holds
nothing out by default and says so in one line; one the preset configures must read.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.data.corpus import load_qa
from agentrl.envs import registry


def heldout_set(configured: Iterable[tuple[str, object]], preset: dict | None = None,
                heldout_qa: Iterable[str] = (), source: str = "the preset") -> HeldOut:
    """Return the HeldOut of ``configured`` (``(environment, settings)`` pairs: every environment table of a preset),
    the defaults of every other registered environment and the rows of the ``heldout_qa`` files."""
    configured = list(configured)
    rows: list[dict] = []
    questions: list[str] = []
    given = {name for name, _ in configured}
    pairs = configured + [(name, None) for name in registry.names() if name not in given and name != "mixed"]
    skipped = []
    for name, settings in pairs:
        spec = registry.get(name)
        if spec.name == "mixed":
            continue  # a mixture's rows are its members' (their tables are in ``configured`` when it has them)
        try:
            found = registry.split_rows(spec, "heldout", settings if settings is not None else spec.settings(), preset)
        except DataError as exc:
            if settings is not None:
                raise
            skipped.append(f"{name} ({str(exc).split(';')[0].split(' (')[0]})")
            continue
        rows += found
        if spec.answer_scored:
            questions += [r.get("question") or "" for r in found]
    for path in heldout_qa:
        found = load_qa(path)
        rows += found
        questions += [r.get("question") or "" for r in found]
    if skipped:
        print(f"held-out set: no default held-out items for {'; '.join(skipped)}")
    return HeldOut((r["id"] for r in rows), questions, source=source, items=len(rows))


def members(name: str, settings) -> list[tuple[str, object]]:
    """Return ``[(name, settings)]`` plus, for an environment made of others (a mixture: settings with ``envs``), each
    member's ``(name, settings)``."""
    out = [(name, settings)]
    for member, sub in (getattr(settings, "envs", None) or {}).items():
        out += members(member, sub)
    return out
