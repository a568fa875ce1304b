"""A preset, read once at the entry point (a command, a notebook, the demo) into typed settings passed down.

:func:`load` merges, in this order and nowhere else (agentrl.core.config.merge), the preset file, the detected card's
``[gpu.<CARD>]`` tables, the ``--set section.key=value`` overrides (command-line flags are written as such overrides)
and a notebook's form, then checks every table against the settings class that reads it (:data:`SCHEMA`): an unknown
table or key, a value of the wrong type or outside its allowed values, a reward that cannot train the environment,
each is a DataError naming where it was written (``file:line``, the ``--set`` text, the form), before anything
loads. The :class:`Preset` hands out each phase's settings, built once, and the preset's held-out set.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.core.config import Layer, Merged, merge, read_preset, set_layer
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.core.manifest import is_secret_key
from agentrl.core.validate import (
    AtLeast0,
    AtLeast1,
    ExistingFile,
    Moved,
    SettingError,
    at_least,
    bare,
    from_dict,
    table_valued,
    unknown,
)
from agentrl.data.corpus import CorpusConfig
from agentrl.data.curate import CurateConfig
from agentrl.envs import registry
from agentrl.envs.heldout import heldout_set, load_recorded, members
from agentrl.retrieval.index import IndexConfig
from agentrl.rollout.evaluate import EvalConfig
from agentrl.train.configs import DPOSettings, GRPOSettings, SFTSettings
from agentrl.train.gpu_plan import CARDS
from agentrl.train.sample import SampleSettings, check_success_key


@dataclass
class DemoSizes:
    """The ``[demo]`` table: how many items the demo and the learning benchmark run per environment."""

    sql_heldout_tasks: AtLeast1 | None = None  # benchmarks/learning.py: SQL held-out tasks scored, spread (None: all)
    search_tasks: AtLeast0 | None = None  # `agentrl demo`: oracle items of each further environment (its demo_items)
    sql_tasks: AtLeast0 | None = None
    textgame_tasks: AtLeast0 | None = None
    math_tasks: AtLeast0 | None = None
    code_tasks: AtLeast0 | None = None
    moved: dict = dataclasses.field(default_factory=dict, metadata={"extra": Moved({
        "train_questions": "the search split: [eval.search] heldout (the questions before the held-out ones train)",
        "heldout_questions": "the search split: [eval.search] heldout (the last questions of the QA file)"})})


@dataclass
class DemoEnvSizes:
    """The ``[demo_envs]`` table: benchmarks/learning.py's text game and math sizes (--envs textgame,math)."""

    textgame_train_games: AtLeast1 = 20
    textgame_heldout_games: AtLeast1 = 20
    textgame_batch: AtLeast1 = 20
    textgame_sft_steps: AtLeast1 = 5
    math_train: ExistingFile = "data/samples/gsm8k_train_100.jsonl"
    math_train_problems: AtLeast1 = 100
    math_heldout_problems: AtLeast1 = 32
    math_sft_steps: AtLeast1 = 8
    sft_max_length: at_least(16) = 2048
    moved: dict = dataclasses.field(default_factory=dict, metadata={"extra": Moved({
        "textgame_max_turns": "[eval.textgame] max_turns (the text game's evaluation budget)",
        "textgame_max_new_tokens": "[eval.textgame] max_new_tokens (the text game's evaluation budget)",
        "math_max_new_tokens": "[eval.math] max_new_tokens (math's evaluation budget)"})})


PHASES = {"corpus": CorpusConfig, "index": IndexConfig, "eval": EvalConfig, "data": CurateConfig, "sft": SFTSettings,
          "grpo": GRPOSettings, "sample": SampleSettings, "dpo": DPOSettings, "rft": SFTSettings}
SCHEMA = {**PHASES, "demo": DemoSizes, "demo_envs": DemoEnvSizes}  # and "gpu": {CARD: {phase: table}}


def _field_type(cls: type, key: str):
    """Return the type of ``key`` in settings class ``cls``: a declared field's, else what one of its extras takes
    for it (an environment's settings class, a TRL field's type); None when it is neither."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    if key in fields and "extra" not in fields[key].metadata:
        return hints[key]
    for f in fields.values():
        extra = f.metadata.get("extra")
        found = extra.type_of(key) if extra is not None else None
        if found is not None:
            return found
    return None


def replaces(path: tuple[str, ...]) -> bool:
    """Return whether the table at ``path`` (``("grpo", "search", "rewards")``) is one setting's value, which a later
    layer replaces whole (agentrl.core.config.merge), rather than a section merged key by key."""
    if path[:1] == ("gpu",):
        path = path[2:]  # [gpu.CARD.grpo...] overlays [grpo...]
    if not path or path[0] not in SCHEMA:
        return False
    cls: typing.Any = SCHEMA[path[0]]
    for i, key in enumerate(path[1:], start=2):
        tp = _field_type(cls, key) if dataclasses.is_dataclass(cls) else None
        if tp is None:
            return False
        if table_valued(tp):
            return i == len(path)
        args = typing.get_args(bare(tp)) or (bare(tp),)
        cls = next((bare(a) for a in args if dataclasses.is_dataclass(bare(a))), None)
    return False


_SAID: set[str] = set()


class Preset:
    """A merged and checked preset: ``data`` its tables, ``path`` its file, ``card`` the GPU class whose table was
    merged in; each phase's settings built once (:meth:`settings`)."""

    def __init__(self, merged: Merged, path: str, card: str | None = None, sets: tuple[str, ...] = ()):
        self.merged, self.path, self.card, self.sets = merged, path, card, tuple(sets)
        self.data = merged.data
        self.data["_path"] = path
        self.data["_card"] = card
        self._built: dict[str, Any] = {}
        self._check()
        for line in merged.replaced:  # once per process: a command builds its preset more than once
            if line not in _SAID:
                _SAID.add(line)
                print(line, file=sys.stderr)

    @property
    def name(self) -> str:
        """The name ``--config`` takes for this preset (its file's stem)."""
        return Path(self.path).stem

    def __contains__(self, table: str) -> bool:
        return table in self.data

    def __getitem__(self, table: str):
        """The merged table ``table`` as the preset holds it (``preset["grpo"]["model"]``; ``_path``, ``_card``)."""
        return self.data[table]

    def get(self, table: str, default=None):
        """Return the merged table ``table`` (a dict), else ``default``."""
        return self.data.get(table, default)

    def _check(self) -> None:
        for name, value in self.data.items():
            if name.startswith("_"):
                continue
            if name == "gpu":
                self._check_cards(value)
            elif name.startswith("grpo_") and name not in SCHEMA:
                env = name.removeprefix("grpo_")
                raise DataError(f"{self.merged.at(name)}: [{name}] tables are gone: the {env} environment's settings "
                                f"and rewards are [grpo.{env}]; [grpo] holds the trainer's (a run of another "
                                "environment: --env, and --set for what differs)")
            elif name not in SCHEMA:
                unknown(name, [*SCHEMA, "gpu"], self.merged.at)
            else:
                self.settings(name)
        self._check_across()

    def _check_across(self) -> None:
        """Check the settings one table holds against another's (the success key of ``[sample]`` against the
        environment ``[grpo]`` trains), naming where the value was written."""
        if "sample" in self.data:
            try:
                check_success_key(self.sample(), self.grpo().env)
            except SettingError as exc:
                path = f"sample.{exc.key}"
                raise DataError(f"{self.merged.at(path)}: {path}: {exc}") from None

    def _check_cards(self, cards: Any) -> None:
        if not isinstance(cards, dict):
            raise DataError(f"{self.merged.at('gpu')}: 'gpu' must be a table of cards ([gpu.T4.sft] ...)")
        for card, tables in cards.items():
            if card not in CARDS:
                unknown(f"gpu.{card}", list(CARDS), self.merged.at)
            for phase, table in (tables or {}).items():
                if phase not in PHASES:
                    unknown(f"gpu.{card}.{phase}", list(PHASES), self.merged.at)
                from_dict(PHASES[phase], table, f"gpu.{card}.{phase}", self.merged.at)

    def settings(self, table: str):
        """Return the typed settings of ``table`` (built once; the class's defaults when the preset has none)."""
        if table not in self._built:
            built = from_dict(SCHEMA[table], self.data.get(table), table, self.merged.at)
            self._built[table] = self._named(table, built)
        return self._built[table]

    def _named(self, table: str, built):
        """Return the run settings ``built`` with what the preset derives for them: GRPO's evaluation budget (its
        environment's ``[eval.<env>]``), and the run's name carrying its environment: a run of another
        environment than the preset file's (``--env sql`` on a preset whose [grpo] trains search) is named
        ``<name>_<env>``, so it never writes into that run's folder; a name given on top of the file (``--name``,
        ``--set``, a form) is taken as it is."""
        if table not in ("eval", "grpo"):
            return built
        if table == "grpo":
            built.budget = self.budget(built.env)  # the [eval.<env>] budget its evaluations run with
        file_layers = [layer for layer in self.merged.layers if layer.where == self.merged.layers[0].where]
        own = merge(file_layers).data.get(table) or {}
        named_by = self.merged.origins.get((table, "name"))
        env_of_file = registry.get(own["env"]).name if isinstance(own.get("env"), str) else registry.DEFAULT
        if built.env != env_of_file and (named_by is None or named_by in file_layers):
            built.name = f"{built.name}_{built.env}"
        return built

    def eval(self) -> EvalConfig:
        """The ``[eval]`` settings."""
        return self.settings("eval")

    def sft(self) -> SFTSettings:
        """The ``[sft]`` settings."""
        return self.settings("sft")

    def grpo(self) -> GRPOSettings:
        """The ``[grpo]`` settings."""
        return self.settings("grpo")

    def dpo(self) -> DPOSettings:
        """The ``[dpo]`` settings."""
        return self.settings("dpo")

    def rft(self) -> SFTSettings:
        """The ``[rft]`` settings (an SFT run of their own: agentrl.train.rft)."""
        if "rft" not in self.data:
            raise DataError(f"{self.path}: the preset has no [rft] table (name, data = \"runs/sample/NAME/successes\", "
                            "adapter = the SFT adapter)")
        return self.settings("rft")

    def sample(self) -> SampleSettings:
        """The ``[sample]`` settings."""
        return self.settings("sample")

    def curate(self) -> CurateConfig:
        """The ``[data]`` settings (curation)."""
        return self.settings("data")

    def demo(self):
        """The ``[demo]`` sizes."""
        return self.settings("demo")

    def demo_envs(self) -> DemoEnvSizes:
        """The ``[demo_envs]`` sizes."""
        return self.settings("demo_envs")

    @functools.cached_property
    def heldout(self) -> HeldOut:
        """The preset's held-out set (agentrl.envs.heldout): every environment table of its runs, the other
        environments' defaults, ``[eval] heldout_qa``; what every training path's gate drops."""
        configured: list[tuple[str, object, str]] = []
        for table in ("eval", "grpo"):
            if table in self.data:
                for env, settings in self.settings(table).envs.items():
                    configured += members(env, settings, f"{table}.{env}")
        ev = self.eval() if "eval" in self.data else None
        return heldout_set(configured, self.data, [ev.heldout_qa] if ev is not None and ev.heldout_qa else [],
                           source=f"preset {self.name}", at=self.merged.at)

    def budget(self, env: str) -> registry.Budget:
        """Return the evaluation budget of environment ``env`` this preset gives (its ``[eval.<env>]`` table's
        ``max_turns`` and ``max_new_tokens``; None where the environment's own applies): what every path that
        evaluates it reads."""
        return registry.budget(self.eval().envs.get(registry.get(env).name))

    def gate(self, *inputs: str | Path) -> HeldOut:
        """Return the held-out set for a run that reads ``inputs`` (run directories, datasets): the users'
        environments their manifests recorded are loaded first, so their held-out items are held too."""
        before = len(registry.names())
        load_recorded(inputs)
        if len(registry.names()) != before:
            self.__dict__.pop("heldout", None)  # computed before those environments were known
        return self.heldout

    def with_layer(self, data: dict, where: str) -> Preset:
        """Return this preset with one more layer on top (a notebook's form: ``{"grpo": {"max_steps": 5}}``)."""
        return Preset(merge([*self.merged.layers, Layer(data, where)], replaces), self.path, self.card, self.sets)

    def value(self, dotted: str):
        """Return the value of ``dotted`` (``grpo.max_steps``) as the settings of its table hold it."""
        table, *rest = dotted.split(".")
        obj = self.settings(table)
        for part in rest:
            obj = getattr(obj, part)
        return obj

    def describe(self) -> dict:
        """Return what a run's manifest records of the preset: file, card, the --set overrides and other layers
        (a credential's value masked)."""
        def shown(expr: str) -> str:
            key, _, value = expr.partition("=")
            return f"{key}=***" if is_secret_key(key.rsplit(".", 1)[-1]) and value else expr

        return {"file": self.path, "card": self.card, "sets": [shown(e) for e in self.sets],
                "layers": [layer.where for layer in self.merged.layers[1:]]}


def load(name_or_path: str | Path | None, sets: Iterable[str] | None = (), *, card: str | None = None,
         flags: Iterable[Layer] = (), form: dict | None = None) -> Preset:
    """Return the preset ``name_or_path`` (None: no preset, every table's defaults) with the card's tables (``card``:
    a key of its ``[gpu]`` table, or None), the ``--set`` overrides ``sets``, the command-line ``flags`` (layers of
    agentrl.app.flags) and a notebook ``form`` merged in that order, every table checked (DataError naming where a
    bad key or value was written)."""
    file = read_preset(name_or_path) if name_or_path is not None else Layer({}, "no --config")
    if card is not None and card not in CARDS:
        raise DataError(f"unknown GPU class {card!r} (choose from {', '.join(CARDS)})")
    layers = [file]
    overlay = (file.data.get("gpu") or {}).get(card) if card else None
    if isinstance(overlay, dict):
        layers.append(Layer(overlay, file.where, file.text, ("gpu", card)))
    sets = tuple(sets or ())
    layers += [set_layer(expr) for expr in sets]
    layers += list(flags)
    if form:
        layers.append(Layer(form, "the notebook's form"))
    return Preset(merge(layers, replaces), file.where, card, sets)


def set_values(value) -> list[str]:
    """Return the ``--set`` overrides a notebook got (``mo.cli_args()`` gives one string, or a list when the flag
    repeats; ``AGENTRL_NB_ARGS`` the same), as a list of ``section.key=value`` strings."""
    if value is None or value is True:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
