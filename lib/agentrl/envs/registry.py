"""The environment registry: each task family is declared once, in its own folder, and found here by name.

A built-in environment is a folder ``agentrl/envs/<name>/``: its ``__init__.py`` defines ``ENVIRONMENT``, an
:class:`Environment` (code beside it, a README with its splits, tools, rewards and metrics). A user's environment is
any module that defines one (``ENVIRONMENT``, or a ``load_environment()`` returning it): ``--env path/to/my_env.py``
or ``--env package.module[:attr]`` load it, with no edit of the library (docs/environments.md). Everything else, the
CLI, evaluation, GRPO, curation, the notebooks' pickers, the mixed environment and the demo, asks this module.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError
from agentrl.core.validate import Extra, SettingError, from_dict
from agentrl.envs import BUILTIN
from agentrl.envs import DEFAULT as DEFAULT  # re-exported: registry.DEFAULT
from agentrl.envs.base import _tool_names, active_env
from agentrl.envs.task import EnvSettings

SPLITS = ("train", "validation", "heldout")  # every environment's; "all" is their union in the source's order


def question_text(row: dict) -> str:
    """Return a task row's question: what the model reads of the item, the default identity of an environment's
    items (agentrl.core.heldout)."""
    return row["question"]


@dataclass(frozen=True)
class Environment:
    """One task family, everything the library asks about it in one place.

    ``settings`` is its settings dataclass (agentrl.envs.task.EnvSettings and its own fields: the split sizes, the
    tools' knobs); a preset gives them per run as ``[eval.<name>]`` / ``[grpo.<name>]``. ``build(settings, preset)``
    returns the :class:`agentrl.envs.task.Task` of a run (environment factory with its tools, system prompt, oracle
    plan, scorer); ``rows(split, settings, preset, source)`` returns task rows of a split: ``train`` (what training
    draws from), ``validation`` (what hyperparameters are chosen on) and ``heldout`` (what runs report on, which no
    training path may use); the three never share an item. ``source`` (a ``--qa`` value: a file or a named source)
    replaces the split's default source. ``score(prediction, row, env)`` returns an episode's metrics; ``success``
    names the headline one (1.0 = solved)."""

    name: str
    summary: str  # one line for listings
    build: Callable[..., Any]
    rows: Callable[..., list[dict]]
    score: Callable[[str | None, dict, Any], dict]
    settings: type = EnvSettings  # its settings dataclass: EnvSettings and its own fields
    env_class: str | type = ""  # the environment class (or "module:Class"): its public methods are the tools
    prompts: dict[str, str] = field(default_factory=dict)  # name -> text; the first is the default
    rewards: dict[str, float] = field(default_factory=dict)  # GRPO's rewards and weights when a run names none
    reward_metrics: dict[str, str] = field(default_factory=dict)  # this env's own rewards: name -> metric it pays
    reward_functions: dict[str, Callable] = field(default_factory=dict)  # more rewards (TRL's signature), by name
    success: str = "em"
    metrics: tuple[str, ...] = ()  # further metrics a summary shows
    answer_scored: bool = True  # golden_answers are the answer (answer_f1 / answer_em / judge can score an episode)
    eval_split: str = "heldout"  # the rows ``agentrl eval`` runs when no split is given ("all": every row)
    evaluable: bool = True  # ``agentrl eval`` runs it on its own rows
    max_turns: int = 6  # an episode's turn budget unless its settings say otherwise
    max_new_tokens: int = 256  # tokens a turn may generate in an evaluation unless its settings say otherwise
    demo_items: int = 0  # ``agentrl demo`` runs the oracle on this many of its eval items (0: not in the demo)
    mixture_note: str = ""  # added to a mixture's system prompt when this env takes part
    metrics_note: str = ""  # how to read its metrics side by side (shown under an evaluation's table)
    folder: str | None = None  # where its README lives
    families: Callable[[Any], tuple[str, ...]] | None = None  # settings -> the envs its episodes come from (a mixture)
    # row -> the text that identifies the item, read from what the model reads of it (the held-out gate matches it
    # inside training rows): the question by default; code, the problem's prompt without the shared instruction
    identity: Callable[[dict], str] = question_text
    # whether a training row holding most of a held-out item's 13-grams is a copy of it (agentrl.core.heldout's second
    # line): not for items generated from a template distinct items share (the text game: one room, other objects)
    near_copies: bool = True
    # row -> the part of its identity whose near copies count (None: all of it); SQL: the question without the table's
    # note, which every task on that table repeats (another question on a held-out task's table is another item)
    near_text: Callable[[dict], str] | None = None

    def families_of(self, settings) -> tuple[str, ...]:
        """Return the task families of this environment's episodes under ``settings``: its own name, or what
        ``families`` says for an environment made of others."""
        return tuple(self.families(settings)) if self.families is not None else (self.name,)


_LOADED: dict[str, Environment] = {}
_SOURCES: dict[str, str] = {}  # a user's environment's name -> where it was loaded from (a file's absolute path)


def source_of(name: str) -> str | None:
    """Return where the user's environment ``name`` was loaded from (an absolute file path or a module name), None
    for a built-in one: what a run's manifest records, so a later phase can load it again."""
    return _SOURCES.get(name)


def names(*, evaluable: bool | None = None) -> tuple[str, ...]:
    """Return the built-in environments' names and those loaded since (``evaluable`` filters), in listing order."""
    found = [*BUILTIN, *(n for n in _LOADED if n not in BUILTIN)]
    if evaluable is None:
        return tuple(found)
    return tuple(n for n in found if get(n).evaluable == evaluable)


def get(name_or_path: str) -> Environment:
    """Return the environment called ``name_or_path``, or the one a user's module defines: ``path/to/env.py`` or
    ``package.module[:attr]``. DataError naming the known environments when there is none."""
    if name_or_path in _LOADED:
        return _LOADED[name_or_path]
    if name_or_path in BUILTIN:
        return _register(_from_module(importlib.import_module(f"agentrl.envs.{name_or_path}"), "ENVIRONMENT"),
                         builtin=True)
    if not _looks_external(name_or_path):
        raise DataError(f"unknown environment '{name_or_path}' (known: {', '.join(names())}; or a file "
                        "path/to/my_env.py or a module name package.module[:attr] that defines ENVIRONMENT)")
    env = _register(load_external(name_or_path))
    target, sep, attr = name_or_path.partition(":") if not (len(name_or_path) > 1 and name_or_path[1] == ":") \
        else (name_or_path, "", "")
    is_file = target.endswith(".py") or "/" in target
    _SOURCES[env.name] = (str(Path(target).expanduser().resolve()) + sep + attr) if is_file else name_or_path
    return env


def _looks_external(value: str) -> bool:
    return value.endswith(".py") or "/" in value or ":" in value or "." in value


def load_external(spec: str) -> Environment:
    """Return the Environment a user's module defines: ``file.py`` (imported under its stem) or a module name,
    optionally ``:attr``; the attribute is an Environment or a function returning one (default: ``ENVIRONMENT``,
    else ``load_environment``)."""
    target, _, attr = spec.partition(":") if not (len(spec) > 1 and spec[1] == ":") else (spec, "", "")
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser()
        if not path.is_file():
            raise DataError(f"environment {spec}: no such file {path}")
        module_name = f"agentrl_user_env_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None or getattr(module, "__file__", None) != str(path.resolve()):
            loader_spec = importlib.util.spec_from_file_location(module_name, path.resolve())
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
            loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise DataError(f"environment {spec}: cannot import {target} ({exc})") from None
    return _from_module(module, attr or None, spec)


def _from_module(module, attr: str | None, where: str | None = None) -> Environment:
    where = where or module.__name__
    candidates = [attr] if attr else ["ENVIRONMENT", "load_environment"]
    for name in candidates:
        value = getattr(module, name, None)
        if value is None:
            continue
        if callable(value) and not isinstance(value, Environment):
            value = value()
        if not isinstance(value, Environment):
            raise DataError(f"environment {where}: {name} is a {type(value).__name__}, not an "
                            "agentrl.envs.registry.Environment")
        return value
    raise DataError(f"environment {where}: the module defines no {' or '.join(candidates)}")


def _register(env: Environment, builtin: bool = False) -> Environment:
    if not builtin and env.name in BUILTIN:
        raise DataError(f"environment name '{env.name}' is a built-in environment's; give yours another name")
    if not (isinstance(env.settings, type) and issubclass(env.settings, EnvSettings)):
        raise DataError(f"environment {env.name}: settings must be a dataclass extending agentrl.envs.task.EnvSettings")
    unknown = [s for s in env.rewards if s not in env.reward_metrics and s not in env.reward_functions
               and s not in GENERIC_REWARDS]
    if unknown:
        raise DataError(f"environment {env.name}: default reward '{unknown[0]}' is neither a generic reward "
                        f"({', '.join(GENERIC_REWARDS)}) nor one of its reward_metrics / reward_functions")
    _LOADED[env.name] = env
    return env


# rewards agentrl.rollout.rewards defines for every environment (an env's own rewards come from its declaration)
GENERIC_REWARDS = ("answer_f1", "answer_em", "format", "tool_use", "task_success", "judge")


def prompt(env: Environment, name_or_text: str | None, **values) -> str:
    """Return the system prompt ``name_or_text`` of ``env`` (a name of its prompts, else the text itself; None: its
    first prompt) with ``{placeholders}`` filled from ``values``."""
    if name_or_text is None:
        if not env.prompts:
            raise DataError(f"environment {env.name} declares no prompt; pass one (prompt = \"...\" or --prompt)")
        name_or_text = next(iter(env.prompts))
    if name_or_text not in env.prompts:
        owner = next((n for n in BUILTIN if n != env.name and name_or_text in get(n).prompts), None)
        if owner is not None:  # another environment's prompt name, not a prompt text
            raise DataError(f"prompt '{name_or_text}' is the {owner} environment's; {env.name}'s prompts: "
                            f"{', '.join(env.prompts) or 'none'} (or give the text itself)")
    text = env.prompts.get(name_or_text, name_or_text)
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def env_class(env: Environment) -> type:
    """Return the environment's class (importing ``module:Class`` on first use)."""
    if isinstance(env.env_class, type):
        return env.env_class
    module, _, attr = env.env_class.partition(":")
    if not module or not attr:
        raise DataError(f"environment {env.name}: env_class must be a class or 'module:Class' (got {env.env_class!r})")
    return getattr(importlib.import_module(module), attr)


def tools(env: Environment) -> tuple[str, ...]:
    """Return the names of the environment's tools (its class's public methods, TRL's rule)."""
    return _tool_names(env_class(env))


def all_prompts() -> list[str]:
    """Return every built-in environment's prompt texts, in registry order (the tiny model's tokenizer reads them)."""
    return [text for name in BUILTIN for text in get(name).prompts.values()]


def own_reward(name: str) -> Environment | None:
    """Return the environment whose own reward ``name`` is (its reward_metrics or reward_functions), else None."""
    for env_name in names():
        env = get(env_name)
        if name in env.reward_metrics or name in env.reward_functions:
            return env
    return None


def env_name(env: Any) -> str | None:
    """Return the registry name of the environment that played the episode: the one it was built for, else the
    registered environment whose class it is an instance of (None when there is none)."""
    if env is None:
        return None
    env = active_env(env)
    name = getattr(env, "_agentrl_env", None)
    if name is None:
        # an environment registered for evaluation only has no class (env_class ""), so nothing is an instance of it
        name = next((n for n in names() if get(n).env_class and isinstance(env, env_class(get(n)))), None)
    return name


def checked(name_or_path: str) -> Environment:
    """Return the environment ``name_or_path`` (:func:`get`) for a setting that names one: an unknown one is a
    SettingError of that setting, so the message says where the name was written."""
    try:
        return get(name_or_path)
    except DataError as exc:
        raise SettingError("env", str(exc)) from None


def settings_of(env: Environment, table: dict | None = None, where: str | None = None, at=None):
    """Return ``env``'s settings from a preset ``table`` (``[eval.<name>]``; None: its defaults), names, types and
    values checked (DataError naming ``where`` and the key)."""
    return from_dict(env.settings, table or {}, where or env.name, at)


@dataclass(frozen=True)
class Budget:
    """An environment's evaluation budget as a preset's ``[eval.<env>]`` table gives it: the assistant turns an
    episode may take and the tokens a turn may generate (None: the environment's own). Every path that evaluates the
    environment reads it (agentrl eval, GRPO's held-out evaluations, SFT's check, sampling, the learning benchmark)
    and records the task's resolved values."""

    max_turns: int | None = None
    max_new_tokens: int | None = None


def budget(settings) -> Budget:
    """Return the evaluation budget an environment's ``settings`` give (an ``[eval.<env>]`` table's)."""
    return Budget(getattr(settings, "max_turns", None), getattr(settings, "max_new_tokens", None))


def within(task, b: Budget):
    """Return ``task`` with the evaluation budget ``b`` (where it gives a value) on it: a copy, the task itself
    unchanged."""
    return dataclasses.replace(task, max_turns=b.max_turns or task.max_turns,
                               max_new_tokens=b.max_new_tokens or task.max_new_tokens)


def build_task(env: Environment, settings, preset: dict | None = None):
    """Return the Task of ``env`` for ``settings`` (its build) with the settings' evaluation budget, else the
    environment's own: the one way a run gets an environment's task."""
    task = env.build(settings, preset or {})
    task.max_new_tokens = task.max_new_tokens or env.max_new_tokens
    return within(task, budget(settings))


def budget_of(task) -> dict:
    """Return the evaluation budget a run with ``task`` records."""
    return {"max_turns": task.max_turns, "max_new_tokens": task.max_new_tokens}


def split_rows(env: Environment, split: str, settings, preset: dict | None = None,
               source: str | None = None) -> list[dict]:
    """Return ``env``'s rows of ``split`` (one of SPLITS, or "all": every row, the source's order) for ``settings``;
    ``source`` replaces the split's default source. An unknown split is a DataError."""
    if split not in (*SPLITS, "all"):
        raise DataError(f"unknown split '{split}' (choose from {', '.join(SPLITS)}, all)")
    return env.rows(split, settings, preset or {}, source)


class EnvTables(Extra):
    """The tables of a run's table named after environments (``[eval.search]``, ``[grpo.sql]``): each holds that
    environment's settings, checked against its settings dataclass (agentrl.core.config.Extra). ``training``: the
    run trains (GRPO), so ``rewards`` may be given."""

    def __init__(self, training: bool):
        self.training = training

    def names(self) -> list[str]:
        """Return the environments a run table may configure."""
        return list(names())

    def type_of(self, key: str):
        """Return the settings class of environment ``key`` (None for a name no loaded environment has)."""
        spec = _LOADED.get(key) or (get(key) if key in BUILTIN else None)
        return spec.settings if spec is not None else None

    def coerce(self, key: str, value, path: str, at, table: dict | None = None):
        """Return the settings of environment ``key`` from its table; KeyError when ``key`` names no environment
        (neither a registered one nor the one the run's ``env`` loads)."""
        spec = _LOADED.get(key) or (get(key) if key in BUILTIN else None)
        if spec is None and table is not None and isinstance(table.get("env"), str) and _looks_external(table["env"]):
            loaded = get(table["env"])
            spec = loaded if loaded.name == key else None
        if spec is None:
            raise KeyError(key)
        if not isinstance(value, dict):
            raise DataError(f"{at(path) + ': ' if at(path) else ''}{path}: expected a table of {key}'s settings, "
                            f"got {value!r}")
        if value.get("rewards") and not self.training:
            where = at(f"{path}.rewards")
            raise DataError(f"{where + ': ' if where else ''}{path}.rewards: rewards train an environment; they go in "
                            f"the GRPO run's table ([grpo.{key}] rewards)")
        for budget_key in ("max_turns", "max_new_tokens") if self.training else ():
            if budget_key in value:
                where = at(f"{path}.{budget_key}")
                raise DataError(f"{where + ': ' if where else ''}{path}.{budget_key}: the evaluation budget of {key} "
                                f"is its [eval.{key}] table's, which every evaluation of it reads (agentrl eval, "
                                "GRPO's held-out evaluations, SFT's check, sampling); GRPO's rollouts take "
                                "max_tool_calling_iterations and max_completion_length")
        return settings_of(spec, value, path, at)
