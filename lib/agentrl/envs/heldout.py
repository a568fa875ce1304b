"""A preset's held-out set: what every training path's gate (agentrl.core.heldout.HeldOut) drops.

Held out are, for every environment loaded in this process (the built-in ones, a user's environment a preset or a
command names, one a run's manifest recorded: :func:`load_recorded`):

- its own ``heldout`` split, with its default settings and, for every table of the preset that configures it
  (``[eval.search]``, ``[grpo.sql]``, a mixture's members), with that table's data sources and the split sizes the
  environment declares (``train``, ``train_from``, ``validation``, ``heldout`` at their defaults): a table that asks
  for fewer held-out items (``[grpo.math] heldout = 32``) cannot give the others to training; one line says so;
- the ``heldout`` split each such table asks for: a setting may add held-out items;
- every row of ``[eval] heldout_qa`` (an evaluation-only file, MultiHop-RAG's validation-200).

Each item is held as its identity, the text the model reads of it (Environment.identity). An environment whose rows
cannot be read here with its defaults (the text game without Java) holds nothing out and says so in one line; one a
preset configures must read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.core.manifest import recorded_sources
from agentrl.data.corpus import load_qa
from agentrl.envs import registry

SPLIT_FIELDS = ("train", "train_from", "validation", "heldout")  # the sizes that decide which rows are held out


def own_settings(settings):
    """Return ``settings`` with the split sizes at their declared defaults (the data sources kept): the settings of
    the environment's own held-out split."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)
                if f.name in SPLIT_FIELDS and f.default is not dataclasses.MISSING}
    return dataclasses.replace(settings, **defaults) if defaults else settings


def heldout_set(configured: Iterable[tuple[str, object, str]], preset: dict | None, heldout_qa: Iterable[str],
                source: str, at: Callable[[str], str] | None = None) -> HeldOut:
    """Return the HeldOut of ``configured`` (``(environment, settings, table)`` triples: every environment table of
    a preset, ``table`` its dotted name), every loaded environment's own held-out split and the rows of the
    ``heldout_qa`` files. ``at(dotted)`` says where a key was written (for the line about a smaller split)."""
    pairs = [*configured, *((name, None, name) for name in registry.names())]
    cache: dict[str, list[dict]] = {}

    def split(spec, settings) -> list[dict]:
        key = f"{spec.name}:{json.dumps(dataclasses.asdict(settings), sort_keys=True, default=str)}"
        if key not in cache:
            cache[key] = registry.split_rows(spec, "heldout", settings, preset)
        return cache[key]

    items: list[str] = []
    near: list[str] = []
    skipped = []
    for name, settings, table in pairs:
        spec = registry.get(name)
        if spec.name == "mixed":
            continue  # a mixture's rows are its members' (their tables are in ``configured`` when it has them)
        try:
            own = split(spec, own_settings(settings if settings is not None else spec.settings()))
        except DataError as exc:
            if settings is not None:
                raise
            skipped.append(f"{name} ({str(exc).split(';')[0].split(' (')[0]})")
            continue
        found = own
        if settings is not None:
            asked = split(spec, settings)
            mine = {spec.identity(r) for r in asked}
            left = [r for r in own if spec.identity(r) not in mine]
            if left:
                where = (at(f"{table}.heldout") if at else "") or table
                print(f"held-out set: {where}: [{table}] holds out {len(asked)} items, fewer than {name}'s own "
                      f"{len(own)}: those {len(left)} stay held out too (a setting may add held-out items, never "
                      "remove them)")
            found = own + asked
        mine, close = identities(spec, found)
        items += mine
        near += close
    for path in heldout_qa:
        found = [r["question"] for r in load_qa(path)]
        items += found
        near += found
    if skipped:
        print(f"held-out set: no default held-out items for {'; '.join(skipped)}")
    return HeldOut(items, source=source, near=near)


def identities(spec, rows: list[dict]) -> tuple[list[str], list[str]]:
    """Return ``(identities, near)`` of ``spec``'s task ``rows``: what identifies each item to the gate, and the
    texts whose near copies count (none where the environment's items share a template: the text game)."""
    return ([spec.identity(r) for r in rows],
            [(spec.near_text or spec.identity)(r) for r in rows] if spec.near_copies else [])


def gate_of(env: str, rows: list[dict], source: str) -> HeldOut:
    """Return the gate holding out ``rows`` of environment ``env`` (a run's own held-out set, outside a preset)."""
    items, near = identities(registry.get(env), rows)
    return HeldOut(items, source=source, near=near)


def members(name: str, settings, table: str) -> list[tuple[str, object, str]]:
    """Return ``[(name, settings, table)]`` plus, for an environment made of others (a mixture: settings with
    ``envs``), each member's, ``table`` being the dotted name of its table."""
    out = [(name, settings, table)]
    for member, sub in (getattr(settings, "envs", None) or {}).items():
        out += members(member, sub, f"{table}.{member}")
    return out


def load_recorded(paths: Iterable[str | Path]) -> list[str]:
    """Load the users' environments that the runs at ``paths`` were made with (the ``env_source`` an evaluation's
    manifest records, the ``env_sources`` of a curated dataset's), so that their held-out splits join every preset's
    held-out set; return their names. One line for a recorded environment that cannot be loaded here."""
    names = []
    for source, manifest in recorded_sources(paths):
        try:
            names.append(registry.get(source).name)
        except DataError as exc:
            print(f"held-out set: the environment {source} recorded by {manifest} cannot be loaded here ({exc}): its "
                  "held-out split is not known to this run")
    return names
