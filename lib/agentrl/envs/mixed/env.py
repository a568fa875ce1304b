"""Mixed-task environment: one GRPO run over several task families, each row routed to its own environment.

Sample mixture (``[grpo] mixture = {math = 0.25, code = 0.25, textgame = 0.25, search = 0.25}``, 8 rows): 2
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

from agentrl.envs import registry
from agentrl.envs.base import tool_methods


def routable(extra=()) -> tuple[str, ...]:
    """Return the families a mixture routes to: every built-in environment but a router itself, then ``extra``
    (a mixture's own environments from outside the package)."""
    builtin = tuple(n for n in registry.BUILTIN if not registry.get(n).routes)
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
    from agentrl.envs.task import EpisodeSettings

    return registry.get(family).build(EpisodeSettings(), {})


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
    from agentrl.envs.base import _tool_names

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


def family_summary(families: list, rewards: list[float], successes: list) -> dict[str, float]:
    """Return ``{"<family>/reward": mean total reward, "<family>/success": mean headline success}`` over the
    rollouts of each family in a batch (rollouts without a reward, NaN, or without a success, None, left out)."""
    import math

    out: dict[str, float] = {}
    for family in sorted({f for f in families if f}):
        got = [r for f, r in zip(families, rewards, strict=True) if f == family and not math.isnan(r)]
        won = [float(s) for f, s in zip(families, successes, strict=True) if f == family and s is not None]
        if got:
            out[f"{family}/reward"] = sum(got) / len(got)
        if won:
            out[f"{family}/success"] = sum(won) / len(won)
    return out


def family_rows(families, split: str, n: int, preset: dict | None = None) -> dict[str, list[dict]]:
    """Return each family's rows of ``split`` (``train`` or ``heldout``; ``n`` for a generator such as the text game):
    its training rows are its ``train`` rows without any item of its ``heldout`` rows (one QA file serves both for
    search), its held-out rows its ``heldout`` rows."""
    from agentrl.core.metrics import same_item_key

    out = {}
    for family in families:
        spec = registry.get(family)
        found = spec.rows(split, None, n, preset or {})
        if split == "train" and not spec.pooled:
            held = {same_item_key(r) for r in spec.rows("heldout", None, n, preset or {})}
            found = [r for r in found if same_item_key(r) not in held]
        out[family] = found
    return out


def mixed_task(settings=None, preset: dict | None = None, mixture=None):
    """Return the mixed Task: MixedEnv over every routable family, each built once from ``settings`` (the run's
    episode settings; default ones without), those in ``mixture`` at once (a missing index fails here, not at the
    first search row); one prompt naming every family's tools plus the notes of the mixture's families; each row
    scored and demonstrated by its family."""
    from agentrl.envs.task import EpisodeSettings, Task

    settings = settings or EpisodeSettings()
    spec = registry.get("mixed")

    @functools.cache
    def build(family: str):
        return registry.get(family).build(settings, preset or {})

    for family in mixture or ():
        build(family)

    def plan(row: dict) -> list:
        oracle = build(row["env"]).oracle_plan
        if oracle is None:
            from agentrl.core.io import DataError

            raise DataError(f"environment {row['env']} has no oracle")
        return oracle(row)

    notes = "".join(registry.get(f).mixture_note for f in mixture or ())
    system = registry.prompt(spec, settings.prompt) + notes
    families = routable(tuple(mixture or ()))
    return Task(name=spec.name, make_env=functools.partial(mixed_env_class(families), build), system_prompt=system,
                oracle_plan=plan, score=mixed_score,
                config={"families": list(families), "given": sorted(mixture or ())})
