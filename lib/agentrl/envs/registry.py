"""The environment registry: each task family is declared once, in its own folder, and found here by name.

A built-in environment is a folder ``agentrl/envs/<name>/``: its ``__init__.py`` defines ``ENVIRONMENT``, an
:class:`Environment` (code beside it, a README with its splits, tools, rewards and metrics). A user's environment is
any module that defines one (``ENVIRONMENT``, or a ``load_environment()`` returning it): ``--env path/to/my_env.py``
or ``--env package.module[:attr]`` load it, with no edit of the library (docs/environments.md). Everything else, the
CLI, evaluation, GRPO, curation, the notebooks' pickers, the mixed environment and the demo, asks this module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError

# the built-in folders, in the order listings show them (and in which the tiny model's tokenizer reads their prompts)
BUILTIN = ("search", "sql", "textgame", "math", "code", "mixed")
DEFAULT = BUILTIN[0]
SPLITS = ("train", "eval", "heldout")
GENERATED_ROWS = 20  # rows an environment that generates its tasks (the text game) makes when nobody says how many


@dataclass(frozen=True)
class Environment:
    """One task family, everything the library asks about it in one place.

    ``build(settings, preset)`` returns the :class:`agentrl.envs.task.Task` of a run (environment factory with its
    tools, system prompt, oracle plan, scorer); ``rows(split, source, n, preset)`` returns task rows: ``train``
    (what training draws from), ``eval`` (what ``agentrl eval`` runs by default) and ``heldout`` (what a training run
    evaluates on and never trains on); ``source`` (a ``--qa`` value: a file or a named source) replaces the default
    source, ``n`` is how many rows a generator should make (others ignore it). ``score(prediction, row, env)`` returns
    an episode's metrics; ``success`` names the headline one (1.0 = solved)."""

    name: str
    summary: str  # one line for listings
    build: Callable[..., Any]
    rows: Callable[..., list[dict]]
    score: Callable[[str | None, dict, Any], dict]
    env_class: str | type = ""  # the environment class (or "module:Class"): its public methods are the tools
    prompts: dict[str, str] = field(default_factory=dict)  # name -> text; the first is the default
    rewards: dict[str, float] = field(default_factory=dict)  # GRPO's rewards and weights when a run names none
    reward_metrics: dict[str, str] = field(default_factory=dict)  # this env's own rewards: name -> metric it pays
    reward_functions: dict[str, Callable] = field(default_factory=dict)  # more rewards (TRL's signature), by name
    success: str = "em"
    metrics: tuple[str, ...] = ()  # further metrics a summary shows
    answer_scored: bool = True  # golden_answers are the answer (answer_f1 / answer_em / judge can score an episode)
    pooled: bool = False  # train and heldout are separate item pools (else GRPO holds out a slice of its train rows)
    routes: bool = False  # rows name their family in ``env`` and each plays in that family's environment (a mixture)
    evaluable: bool = True  # ``agentrl eval`` runs it on its own rows
    row_metadata: bool = True  # GRPO's dataset carries each row's metadata (the env rebuilds its task from it)
    min_turns: int = 0  # evaluation gives an episode at least this many turns unless told otherwise
    demo_items: int = 0  # ``agentrl demo`` runs the oracle on this many of its eval items (0: not in the demo)
    mixture_note: str = ""  # added to a mixture's system prompt when this env takes part
    metrics_note: str = ""  # how to read its metrics side by side (shown under an evaluation's table)
    folder: str | None = None  # where its README lives


_LOADED: dict[str, Environment] = {}


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
    return _register(load_external(name_or_path))


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
            raise DataError(f"--env {spec}: no such file {path}")
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
            raise DataError(f"--env {spec}: cannot import {target} ({exc})") from None
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
            raise DataError(f"--env {where}: {name} is a {type(value).__name__}, not an "
                            "agentrl.envs.registry.Environment")
        return value
    raise DataError(f"--env {where}: the module defines no {' or '.join(candidates)}")


def _register(env: Environment, builtin: bool = False) -> Environment:
    if not builtin and env.name in BUILTIN:
        raise DataError(f"environment name '{env.name}' is a built-in environment's; give yours another name")
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
    from agentrl.envs.base import _tool_names

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
    from agentrl.envs.base import active_env

    env = active_env(env)
    name = getattr(env, "_agentrl_env", None)
    if name is None:
        name = next((n for n in names() if isinstance(env, env_class(get(n)))), None)
    return name
