"""Mixed-task environment: one GRPO run over several task families, each row routed to its own environment.

Sample mixture (``[grpo] mixture = {math = 0.5, code = 0.25, textgame = 0.25}``, 8 rows): 4 GSM8K problems, 2
HumanEval problems and 2 text games, interleaved; each row carries ``env`` (its family) and ``task`` (its
metadata as JSON). TRL gives one tool list to the whole run, so the environment offers the union of the
families' tools (``act``, ``calculator``, ``execute_sql``, ``run_python``); a tool that does not belong to the
row's family answers with an error naming the family's own tools.

Metrics: each family's own (see its module); the ``task_success`` reward is the family's headline success
(``em``: game solved, math-verify match, tests passed, SQL answer/state match), and every family's mean reward
and success are logged separately as ``<family>/reward`` and ``<family>/success``.
"""

from __future__ import annotations

import json
import random

FAMILIES = ("textgame", "math", "code", "sql")


def family_task(name: str):
    """Return the Task of one family (the evaluation's builders, default settings)."""
    from agentrl import tasks

    builders = {"textgame": tasks.textgame_task, "math": tasks.math_task, "code": tasks.code_task,
                "sql": tasks.sql_task}
    if name not in builders:
        raise ValueError(f"mixture: unknown task family '{name}' (choose from {', '.join(FAMILIES)})")
    return builders[name]()


class MixedEnv:
    """Routes each episode to the environment of its row's family (one instance per family, reused)."""

    def __init__(self):
        self._envs: dict = {}
        self._family: str | None = None

    def reset(self, **row) -> None:
        """Start an episode in the environment of ``row["env"]``."""
        family = row.get("env")
        if family not in FAMILIES:
            raise ValueError(f"mixed-task row {row.get('id')!r} has env {family!r}, not one of {FAMILIES}")
        if family not in self._envs:
            self._envs[family] = family_task(family).make_env()
        self._family = family
        self._envs[family].reset(**row)

    def _interrupt(self) -> None:
        """Stop the current family's tool call in progress (see envs.base.call_tool)."""
        interrupt = getattr(self._envs.get(self._family), "_interrupt", None)
        if interrupt is not None:
            interrupt()

    def _close(self) -> None:
        """Release every family environment's episode resources."""
        for env in self._envs.values():
            close = getattr(env, "_close", None)
            if close is not None:
                close()

    def _tool(self, name: str):
        env = self._envs.get(self._family)
        fn = getattr(env, name, None) if env is not None else None
        if fn is None:
            from agentrl.envs.base import tool_methods

            own = ", ".join(sorted(tool_methods(env))) if env is not None else "none"
            raise RuntimeError(f"the {name} tool is not part of this {self._family} task; its tools: {own}")
        return fn

    def act(self, command: str) -> str:
        """Perform one action in the text game and return what happens, the score and the valid actions.

        Args:
            command: One action, for example "open wardrobe" or "put clean gray blazer in wardrobe".
        """
        return self._tool("act")(command)

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, for example "(48 + 24) * 2 / 3".
        """
        return self._tool("calculator")(expression)

    def execute_sql(self, query: str) -> str:
        """Run one SQL statement on the database and return the result as a small text table.

        Args:
            query: A single SQLite statement. Quote table and column names that contain spaces with double quotes.
        """
        return self._tool("execute_sql")(query)

    def run_python(self, code: str) -> str:
        """Run a Python program in a sandbox and return its exit status, stdout and stderr.

        Args:
            code: A complete Python program (standard library only; no network, no files outside its temp dir).
        """
        return self._tool("run_python")(code)


def mixed_score(prediction: str | None, row: dict | None, env) -> dict:
    """Return the metrics of the row's family for an episode of the mixed environment."""
    family = (row or {}).get("env") or (env._family if env is not None else None)
    inner = env._envs.get(family) if env is not None else None
    return family_task(family).score(prediction, row, inner)


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


def _family_metric(key: str, completions, environments, kwargs) -> list[float | None]:
    from agentrl.agent import extract_answer
    from agentrl.rewards import final_text

    envs = environments or [None] * len(completions)
    families = kwargs.get("env") or [None] * len(completions)
    golds = kwargs.get("golden_answers") or [[] for _ in completions]
    values: list[float | None] = []
    by_family: dict[str, list[float]] = {}
    for c, env, family, gold in zip(completions, envs, families, golds, strict=True):
        if not isinstance(env, MixedEnv) or family is None:
            values.append(None)
            continue
        m = mixed_score(extract_answer(final_text(c)), {"env": family, "golden_answers": gold or []}, env)
        values.append(float(m[key]))
        by_family.setdefault(family, []).append(float(m[key]))
    if "log_metric" in kwargs:
        for family, vals in by_family.items():
            kwargs["log_metric"](f"{family}/reward", sum(vals) / len(vals))
            kwargs["log_metric"](f"{family}/success", sum(v >= 1.0 for v in vals) / len(vals))
    return values


def task_success(prompts, completions, completion_ids=None, environments=None, **kwargs) -> list[float | None]:
    """The row family's headline success (``em``) for a mixed-task episode; every family's mean reward and
    success are logged separately. None outside the mixed environment."""
    return _family_metric("em", completions, environments, kwargs)


def training_sources(families, n: int) -> dict[str, list[dict]]:
    """Return each family's training rows (at least ``n`` where available): text games from train-fold seeds,
    GSM8K's first 100 training problems (disjoint from the held-out slice), HumanEval (the only offline code
    set: its figures are training-set figures), synthetic SQL tables (DB Bench is evaluation only)."""
    out = {}
    for family in families:
        if family == "textgame":
            from agentrl.envs.textgame import textgame_tasks

            out[family] = textgame_tasks("train", n)
        elif family == "math":
            from agentrl.envs.math import load_gsm8k

            out[family] = load_gsm8k("data/samples/gsm8k_train_100.jsonl")
        elif family == "code":
            from agentrl.envs.code import humaneval_tasks

            out[family] = humaneval_tasks()
        elif family == "sql":
            from agentrl.envs.sql_tasks import synthetic_sql_tasks

            out[family] = synthetic_sql_tasks()
        else:
            raise ValueError(f"mixture: unknown task family '{family}' (choose from {', '.join(FAMILIES)})")
    return out


def mixed_task():
    """Return the mixed Task: MixedEnv, one prompt naming every family's tools, each row scored by its family."""
    from agentrl.prompts import system_prompt
    from agentrl.tasks import Task

    def plan(row: dict) -> list:
        return family_task(row["env"]).oracle_plan(row)

    return Task(name="mixed", make_env=MixedEnv, system_prompt=system_prompt("mixed"), oracle_plan=plan,
                score=mixed_score, config={"families": list(FAMILIES)})
