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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.core.config import Layer, Merged, Moved, from_dict, merge, read_preset, set_layer, unknown
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.core.manifest import is_secret_key
from agentrl.data.corpus import CorpusConfig
from agentrl.data.curate import CurateConfig
from agentrl.envs.heldout import heldout_set, members
from agentrl.retrieval.index import IndexConfig
from agentrl.rollout.evaluate import EvalConfig
from agentrl.train.configs import DPOSettings, GRPOSettings, SFTSettings
from agentrl.train.gpu_plan import CARDS
from agentrl.train.sample import SampleSettings


@dataclass
class DemoSizes:
    """The ``[demo]`` table: how many items the demo and the learning benchmark run per environment."""

    sql_heldout_tasks: int | None = None  # benchmarks/learning.py: SQL held-out tasks scored, spread (None: all)
    search_tasks: int | None = None  # `agentrl demo`: oracle items of each further environment (its demo_items)
    sql_tasks: int | None = None
    textgame_tasks: int | None = None
    math_tasks: int | None = None
    code_tasks: int | None = None
    moved: dict = dataclasses.field(default_factory=dict, metadata={"extra": Moved({
        "train_questions": "the search split: [eval.search] heldout (the questions before the held-out ones train)",
        "heldout_questions": "the search split: [eval.search] heldout (the last questions of the QA file)"})})


@dataclass
class DemoEnvSizes:
    """The ``[demo_envs]`` table: benchmarks/learning.py's text game and math sizes (--envs textgame,math)."""

    textgame_train_games: int = 20
    textgame_heldout_games: int = 20
    textgame_max_turns: int = 10
    textgame_batch: int = 20
    textgame_max_new_tokens: int = 48
    textgame_sft_steps: int = 5
    math_train: str = "data/samples/gsm8k_train_100.jsonl"
    math_train_problems: int = 100
    math_heldout_problems: int = 32
    math_max_new_tokens: int = 160
    math_sft_steps: int = 8
    sft_max_length: int = 2048


PHASES = {"corpus": CorpusConfig, "index": IndexConfig, "eval": EvalConfig, "data": CurateConfig, "sft": SFTSettings,
          "grpo": GRPOSettings, "sample": SampleSettings, "dpo": DPOSettings, "rft": SFTSettings}
SCHEMA = {**PHASES, "demo": DemoSizes, "demo_envs": DemoEnvSizes}  # and "gpu": {CARD: {phase: table}}


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
            self._built[table] = from_dict(SCHEMA[table], self.data.get(table), table, self.merged.at)
        return self._built[table]

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
        configured: list[tuple[str, object]] = []
        for table in ("eval", "grpo"):
            if table in self.data:
                for env, settings in self.settings(table).envs.items():
                    configured += members(env, settings)
        ev = self.eval() if "eval" in self.data else None
        return heldout_set(configured, self.data, [ev.heldout_qa] if ev is not None and ev.heldout_qa else [],
                           source=f"preset {self.name}")

    def with_layer(self, data: dict, where: str) -> Preset:
        """Return this preset with one more layer on top (a notebook's form: ``{"grpo": {"max_steps": 5}}``)."""
        return Preset(merge([*self.merged.layers, Layer(data, where)]), self.path, self.card, self.sets)

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
    return Preset(merge(layers), file.where, card, sets)


def set_values(value) -> list[str]:
    """Return the ``--set`` overrides a notebook got (``mo.cli_args()`` gives one string, or a list when the flag
    repeats; ``AGENTRL_NB_ARGS`` the same), as a list of ``section.key=value`` strings."""
    if value is None or value is True:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
