"""Mixed-task environment: one GRPO run over several task families, each row routed to its own environment.

Sample mixture (``[grpo.mixed] mixture = {math = 0.25, code = 0.25, textgame = 0.25, search = 0.25}``, 8 rows): 2
GSM8K problems, 2 HumanEval problems, 2 text games and 2 HotpotQA questions, interleaved; each row carries
``env`` (its family) and ``task`` (its metadata as JSON). TRL gives one tool list to the whole run, so the
environment offers the union of the registered families' tools (each a delegate with the family tool's own
signature and docstring, so the schemas are the family's); a tool that does not belong to the row's family answers
with an error naming the family's own tools. Every family is built from the run's own episode settings (search
rows need the preset's index; its retriever is loaded once and shared by every episode).

Training rows come from each family's ``train`` rows, held-out rows from its ``heldout`` rows (agentrl.envs.registry:
train-fold games vs dev-fold games, GSM8K's training problems vs the held-out slice, HumanEval/0..99 vs the rest,
synthetic SQL tables vs DB Bench dev, the head of the QA file vs its tail); an item held out is never trained on.

Metrics: each family's own (see its folder's README); the ``task_success`` reward (agentrl.rollout.rewards) is the
family's headline success, and the trainer logs each family's weighted total reward and headline success as
``<family>/reward`` and ``<family>/success`` (agentrl.train.grpo).
"""

from __future__ import annotations

import functools
import inspect
import json
import random

from agentrl.core.io import DataError
from agentrl.envs import registry
from agentrl.envs.base import _tool_names, tool_methods
from agentrl.envs.task import Task


def routable(extra=()) -> tuple[str, ...]:
    """Return the families a mixture routes to: every built-in environment but a router itself, then ``extra``
    (a mixture's own environments from outside the package)."""
    builtin = tuple(n for n in registry.BUILTIN if n != "mixed")
    return (*builtin, *(n for n in extra if n not in builtin))


class MixedBase:
    """Routes each episode to the environment of its row's family (one instance per family, reused); ``build``
    returns a family's Task (default: the family built with default episode settings)."""

    def __init__(self, build=None):
        self._build = build or _default_task
        self._envs: dict = {}
        self._family: str | None = None

    _families: tuple[str, ...] = ()  # set by mixed_env_class

    def reset(self, **row) -> None:
        """Start an episode in the environment of ``row["env"]``."""
        family = row.get("env")
        if family not in self._families:
            raise ValueError(f"mixed-task row {row.get('id')!r} has env {family!r}, not one of {self._families}")
        if family not in self._envs:
            self._envs[family] = self._build(family).make_env()
        self._family = family
        self._envs[family].reset(**row)

    def _active(self):
        """Return the environment of the current row's family (None before the first reset)."""
        return self._envs.get(self._family)

    def _interrupt(self) -> None:
        """Stop the current family's tool call in progress (see envs.base.call_tool)."""
        interrupt = getattr(self._active(), "_interrupt", None)
        if interrupt is not None:
            interrupt()

    def _close(self) -> None:
        """Release every family environment's episode resources."""
        for env in self._envs.values():
            close = getattr(env, "_close", None)
            if close is not None:
                close()

    def _tool(self, name: str):
        env = self._active()
        fn = getattr(env, name, None) if env is not None else None
        if fn is None:
            own = ", ".join(sorted(tool_methods(env))) if env is not None else "none"
            raise RuntimeError(f"the {name} tool is not part of this {self._family} task; its tools: {own}")
        return fn


@functools.cache
def _default_task(family: str):
    spec = registry.get(family)
    return registry.build_task(spec, spec.settings(), {})


@functools.cache
def mixed_env_class(families: tuple[str, ...]) -> type:
    """Return the MixedEnv class offering the union of ``families``' tools (the first family to name a tool gives its
    signature and docstring)."""
    methods: dict = {}
    for family in families:
        cls = registry.env_class(registry.get(family))
        for name in tool_methods_of(cls):
            if name not in methods:
                methods[name] = _delegate(inspect.getattr_static(cls, name), name)
    return type("MixedEnv", (MixedBase,), {"__module__": __name__, "__doc__": MixedBase.__doc__,
                                           "_families": families, **methods})


def tool_methods_of(cls: type) -> tuple[str, ...]:
    """Return the tool names of an environment class (agentrl.envs.base's rule)."""
    return _tool_names(cls)


def _delegate(fn, name: str):
    if inspect.iscoroutinefunction(fn):
        async def tool(self, *args, **kwargs):
            return await self._tool(name)(*args, **kwargs)
    else:
        def tool(self, *args, **kwargs):
            return self._tool(name)(*args, **kwargs)
    return functools.wraps(fn)(tool)


MixedEnv = mixed_env_class(routable())


def mixed_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the metrics of the row's family for an episode of the mixed environment."""
    family = (row or {}).get("env") or (env._family if env is not None else None)
    inner = env._envs.get(family) if env is not None else None
    return registry.get(family).score(prediction, row or {}, inner)


def mixture_rows(mixture: dict[str, float], sources: dict[str, list[dict]], n: int, seed: int = 0) -> list[dict]:
    """Return ``n`` rows drawn from each family's rows in the configured proportions (largest remainders),
    shuffled with ``seed``; each row gains ``env`` and ``task`` (its metadata as JSON)."""
    total = sum(mixture.values())
    if total <= 0 or any(w < 0 for w in mixture.values()):
        raise ValueError("mixture proportions must be non-negative and not all zero")
    exact = {k: n * w / total for k, w in mixture.items()}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:n - sum(counts.values())]:
        counts[k] += 1
    rows = []
    for family, count in counts.items():
        pool = sources[family]
        if count > len(pool):
            raise ValueError(f"mixture wants {count} {family} rows but only {len(pool)} are available")
        rows += [{**r, "env": family, "task": json.dumps(r.get("metadata") or {})} for r in pool[:count]]
    random.Random(seed).shuffle(rows)
    return rows


def member_settings(settings, family: str):
    """Return the settings of mixture member ``family``: its table inside the mixture's (``[grpo.mixed.search]``),
    else its defaults."""
    spec = registry.get(family)
    return settings.envs.get(family) or spec.settings()


def mixture_split(settings, split: str, preset: dict | None = None) -> list[dict]:
    """Return the mixture's rows of ``split``: ``settings.train`` (train), ``validation`` or ``heldout`` rows drawn
    from each member's own rows of that split in the mixture's proportions (agentrl.envs.registry: its train,
    validation and heldout rows never share an item)."""
    if not settings.mixture:
        raise DataError("the mixed environment needs a mixture, e.g. [grpo.mixed] mixture = "
                        "{math = 0.5, code = 0.25, textgame = 0.25}")
    n = {"train": settings.train, "validation": settings.validation, "heldout": settings.heldout}[split]
    if not n:
        return []
    sources = {f: registry.split_rows(registry.get(f), split, member_settings(settings, f), preset)
               for f in settings.mixture}
    try:
        return mixture_rows(settings.mixture, sources, n, settings.seed)
    except ValueError as exc:
        raise DataError(f"mixture: {exc}") from None


def mixed_task(settings, preset: dict | None = None):
    """Return the mixed Task: MixedEnv over every routable family, each built once from its settings (its table in
    the mixture's, else its defaults), those in the mixture at once (a missing index fails here, not at the first
    search row); one prompt naming every family's tools plus the notes of the mixture's families; each row scored
    and demonstrated by its family."""
    spec = registry.get("mixed")
    mixture = settings.mixture

    @functools.cache
    def build(family: str):
        return registry.build_task(registry.get(family), member_settings(settings, family), preset or {})

    for family in mixture:
        build(family)

    def plan(row: dict) -> list:
        oracle = build(row["env"]).oracle_plan
        if oracle is None:
            raise DataError(f"environment {row['env']} has no oracle")
        return oracle(row)

    notes = "".join(registry.get(f).mixture_note for f in mixture)
    system = registry.prompt(spec, settings.prompt) + notes
    families = routable(tuple(mixture))
    # the members' largest budget, unless the mixture's settings give one (agentrl.envs.registry.build_task)
    turns = max(build(f).max_turns for f in mixture) if mixture else spec.max_turns
    tokens = max(build(f).max_new_tokens for f in mixture) if mixture else spec.max_new_tokens
    return Task(name=spec.name, make_env=functools.partial(mixed_env_class(families), build), system_prompt=system,
                oracle_plan=plan, score=mixed_score, families=tuple(mixture), max_turns=turns, max_new_tokens=tokens,
                config={"families": list(families), "given": sorted(mixture)})
