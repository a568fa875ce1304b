"""Task families: the environment, system prompt, oracle plan and scoring that belong together.

The agent loop, batch runner, SFT export and GRPO take a Task and stay general; adding a family means
writing its environment module and one builder here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    """Everything the agent loop needs to know about a family of tasks."""

    name: str
    make_env: Callable[[], Any]
    system_prompt: str
    oracle_plan: Callable[[dict], list]
    score: Callable[[str | None, dict, Any], dict]
    config: dict = field(default_factory=dict)


def answer_score(prediction: str | None, row: dict, env: Any) -> dict:
    """Return answer metrics (em, f1, precision, recall, acc) against the row's golden answers."""
    from agentrl.metrics import answer_metrics

    return answer_metrics(prediction, row.get("golden_answers") or [])


def search_score(prediction: str | None, row: dict, env: Any) -> dict:
    """Return the answer metrics plus ``grounded`` (1.0 when the answer is in the passages the episode saw)."""
    from agentrl.envs.search import grounded

    return {**answer_score(prediction, row, env), "grounded": grounded(prediction, getattr(env, "shown", []))}


def search_task(backend, *, top_k: int = 5, max_searches: int = 4, prompt: str = "search",
                passage_chars: int | None = None, max_query_chars: int | None = None) -> Task:
    """Return the search/QA task over a LocalSearch or MCPSearch backend. A query longer than
    ``max_query_chars`` (default ``agentrl.envs.search.MAX_QUERY_CHARS``, 2,000) is a tool error for the model."""
    from agentrl.envs.search import MAX_QUERY_CHARS, search_env_factory
    from agentrl.io import DataError
    from agentrl.policies.oracle import search_plan
    from agentrl.prompts import system_prompt

    limit = MAX_QUERY_CHARS if max_query_chars is None else max_query_chars
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DataError(f"max_query_chars must be a positive integer (got {max_query_chars!r})")
    env = search_env_factory(backend, top_k=top_k, max_searches=max_searches, passage_chars=passage_chars,
                             max_query_chars=limit)
    config = {"top_k": top_k, "max_searches": max_searches, "prompt": prompt, "passage_chars": passage_chars}
    if limit != MAX_QUERY_CHARS:  # only a changed limit enters the run fingerprint: older runs still resume
        config["max_query_chars"] = limit
    return Task(name="search", make_env=env,
                system_prompt=system_prompt(prompt, max_searches=max_searches), oracle_plan=search_plan,
                score=search_score, config=config)


def sql_task(*, prompt: str = "sql", max_calls: int = 8, partial_credit: float = 0.1, jaccard: bool = False,
             scoring: str = "agentbench", backend: str = "sqlite") -> Task:
    """Return the SQL task over per-episode databases: SQLite in-process (agentrl.envs.sql, the default) or a
    MariaDB server (agentrl.envs.mariadb; raises DataError when it is not installed). ``scoring`` picks the
    headline em: AgentBench's rules (default) or the lenient normalised match."""
    import functools

    from agentrl.envs.sql import SQLEnv, oracle_plan, sql_score
    from agentrl.io import DataError
    from agentrl.prompts import system_prompt

    if backend == "mariadb":
        from agentrl.envs import mariadb

        mariadb.binaries()  # fail before the first item, naming the package to install
        cls, plan = mariadb.MariaDBEnv, mariadb.oracle_plan
        prompt = "sql_mysql" if prompt == "sql" else prompt
    elif backend == "sqlite":
        cls, plan = SQLEnv, oracle_plan
    else:
        raise DataError(f"unknown SQL backend '{backend}' (choose from sqlite, mariadb)")
    env = functools.partial(cls, max_calls=max_calls, partial_credit=partial_credit, jaccard=jaccard, scoring=scoring)
    return Task(name="sql", make_env=env, system_prompt=system_prompt(prompt, max_calls=max_calls),
                oracle_plan=plan, score=sql_score,
                config={"prompt": prompt, "max_calls": max_calls, "partial_credit": partial_credit, "jaccard": jaccard,
                        "scoring": scoring, "backend": backend})


def textgame_task(*, prompt: str = "textgame", max_steps: int = 50) -> Task:
    """Return the text-game task over TextWorldExpress games from a per-process pool (agentrl.envs.textgame)."""
    import functools

    from agentrl.envs.textgame import TextGameEnv, oracle_plan, require_java, textgame_score
    from agentrl.prompts import system_prompt

    require_java()  # fail before the first item, naming the package to install
    return Task(name="textgame", make_env=functools.partial(TextGameEnv, max_steps=max_steps),
                system_prompt=system_prompt(prompt, max_steps=max_steps), oracle_plan=oracle_plan,
                score=textgame_score, config={"prompt": prompt, "max_steps": max_steps})


def math_task(*, prompt: str = "math", max_calls: int = 20) -> Task:
    """Return the GSM8K math task with the calculator tool and math-verify scoring (agentrl.envs.math)."""
    import functools

    from agentrl.envs.math import MathEnv, math_score, oracle_plan
    from agentrl.prompts import system_prompt

    return Task(name="math", make_env=functools.partial(MathEnv, max_calls=max_calls),
                system_prompt=system_prompt(prompt, max_calls=max_calls), oracle_plan=oracle_plan,
                score=math_score, config={"prompt": prompt, "max_calls": max_calls})


def code_task(*, prompt: str = "code", max_calls: int = 10, timeout: float = 10.0) -> Task:
    """Return the HumanEval code task: sandboxed ``run_python`` and a pass@1 score (agentrl.envs.code)."""
    import functools

    from agentrl.envs.code import CodeEnv, code_score, oracle_plan
    from agentrl.prompts import system_prompt
    from agentrl.sandbox import SandboxLimits

    env = functools.partial(CodeEnv, limits=SandboxLimits(timeout=timeout), max_calls=max_calls)
    return Task(name="code", make_env=env, system_prompt=system_prompt(prompt, max_calls=max_calls),
                oracle_plan=oracle_plan, score=code_score,
                config={"prompt": prompt, "max_calls": max_calls, "timeout": timeout})
