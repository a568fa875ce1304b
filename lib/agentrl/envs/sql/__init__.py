"""sql: database questions and edits with one tool, ``execute_sql(query)``, scored by AgentBench's rules on a
per-episode SQLite database or a private MariaDB server (README.md beside this file)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from agentrl.core.config import data_file
from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast0, AtLeast1, Fraction, file_or
from agentrl.envs import registry
from agentrl.envs.registry import Environment
from agentrl.envs.sql import mariadb, mariadb_server
from agentrl.envs.sql.dbbench import load_dbbench
from agentrl.envs.sql.env import SQLEnv, sql_score
from agentrl.envs.sql.oracle import oracle_plan
from agentrl.envs.sql.synthetic import synthetic_sql_tasks
from agentrl.envs.task import EnvSettings, Task

DBBENCH_DEV = "data/samples/dbbench_dev.jsonl"  # AgentBench DB Bench dev: evaluation only, never training
SYNTHETIC = "synthetic"  # generated tables and questions (agentrl.envs.sql.synthetic): what SQL training uses

PROMPTS = {
    "sql": (
        "You are a database agent. Use the `execute_sql` tool to inspect and query the SQLite database "
        "(one statement per call; quote table and column names with double quotes). Use at most {max_calls} "
        "calls.\nFor a question, reply with the answer value only inside <answer></answer> tags; several "
        "values as a JSON list, e.g. <answer>[\"a\", \"b\"]</answer>. For a request to change the data, execute "
        "the statement, then reply "
        "<answer>done</answer>."
    ),
    "sql_mysql": (
        "You are a database agent. Use the `execute_sql` tool to inspect and query the MySQL database "
        "(one statement per call; quote table and column names with backticks). Use at most {max_calls} "
        "calls.\nFor a question, reply with the answer value only inside <answer></answer> tags; several "
        "values as a JSON list, e.g. <answer>[\"a\", \"b\"]</answer>. For a request to change the data, execute "
        "the statement, then reply <answer>done</answer>."
    ),
}


MAX_CALLS = 8  # the tool-call budget when the settings give none


@dataclass
class SQLSettings(EnvSettings):
    """The SQL environment's settings ([eval.sql], [grpo.sql]): where its tasks come from, its splits, the database
    backend and the scoring."""

    # training tasks: generated tables (agentrl.envs.sql.synthetic); DB Bench is refused
    train_qa: file_or(SYNTHETIC) = SYNTHETIC
    qa: file_or(SYNTHETIC) = DBBENCH_DEV  # held-out tasks: a DB Bench-layout file (AgentBench DB Bench dev)
    # train_qa = "synthetic": the generator's seed; another seed draws 20 other tables (ids syn<seed>_...), e.g. for
    # GRPO on tasks the SFT demonstrations (seed 0) never showed
    synthetic_seed: AtLeast0 = 0
    train: AtLeast1 | None = None  # training tasks, from the first (None: all but the validation ones)
    validation: AtLeast0 = 0  # the last training tasks: hyperparameters are chosen on them, never trained on
    heldout: AtLeast0 | None = None  # the first N tasks of ``qa`` (None: all of them)
    partial_credit: Fraction = 0.1  # exec score when statements ran but the result/final table is wrong
    jaccard: bool = False  # Jaccard overlap of rows as partial credit when larger than the above
    scoring: Literal["agentbench", "lenient"] = "agentbench"  # the headline em: AgentBench's rules or normalised values
    backend: Literal["sqlite", "mariadb"] = "sqlite"  # per-episode SQLite databases or a private MariaDB server


def sql_task(*, prompt: str | None = None, max_calls: int = MAX_CALLS, partial_credit: float = 0.1,
             jaccard: bool = False, scoring: str = "agentbench", backend: str = "sqlite", max_turns: int = 6):
    """Return the SQL Task over per-episode databases: SQLite in-process (the default) or a MariaDB server
    (DataError when it is not installed). ``scoring`` picks the headline em: AgentBench's rules (default) or the
    lenient normalised match."""
    if backend == "mariadb":
        mariadb_server.binaries()  # fail before the first item, naming the package to install
        cls, plan = mariadb.MariaDBEnv, mariadb.oracle_plan
        prompt = "sql_mysql" if prompt in (None, "sql") else prompt
    elif backend == "sqlite":
        cls, plan = SQLEnv, oracle_plan
        prompt = prompt or "sql"
    else:
        raise DataError(f"unknown SQL backend '{backend}' (choose from sqlite, mariadb)")
    env = functools.partial(cls, max_calls=max_calls, partial_credit=partial_credit, jaccard=jaccard, scoring=scoring)
    return Task(name=ENVIRONMENT.name, make_env=env,
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls),
                oracle_plan=plan, score=sql_score, max_turns=max_turns,
                config={"prompt": prompt, "max_calls": max_calls, "partial_credit": partial_credit, "jaccard": jaccard,
                        "scoring": scoring, "backend": backend})


def build(settings: SQLSettings, preset: dict | None = None):
    """Return the SQL Task for ``settings``."""
    return sql_task(prompt=settings.prompt, max_calls=MAX_CALLS if settings.max_tool_calls is None
                    else settings.max_tool_calls, partial_credit=settings.partial_credit, jaccard=settings.jaccard,
                    scoring=settings.scoring, backend=settings.backend,
                    max_turns=settings.max_turns or ENVIRONMENT.max_turns)


def _tasks(source: str, split: str, seed: int = 0) -> list[dict]:
    if source == SYNTHETIC:
        return synthetic_sql_tasks(seed=seed)
    if split in ("train", "validation") and "dbbench" in str(source).lower():
        raise DataError(f"qa = {source!r}: DB Bench is for evaluation only; train on train_qa = '{SYNTHETIC}'")

    return load_dbbench(data_file(source))


def rows(split: str, settings: SQLSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return SQL task rows of ``split``: ``train`` and ``validation`` from ``train_qa`` (the synthetic tasks;
    validation the last ``validation``), ``heldout`` the first ``heldout`` of ``qa`` (DB Bench dev), ``all`` all of
    them; ``source`` replaces the split's file (a DB Bench-layout file, or ``synthetic``)."""
    if split == "all":
        if source is not None:  # one file (or "synthetic"): its tasks, once
            return _tasks(source, "heldout", settings.synthetic_seed)
        return [r for s in ("train", "validation", "heldout") for r in rows(s, settings, preset, source)]
    if split == "heldout":
        found = _tasks(source or settings.qa, split, settings.synthetic_seed)
        return found if settings.heldout is None else found[:settings.heldout]
    found = _tasks(source or settings.train_qa, split, settings.synthetic_seed)
    val = min(max(0, settings.validation), len(found))
    if split == "validation":
        return found[len(found) - val:]
    found = found[:len(found) - val]
    return found if settings.train is None else found[:settings.train]


def question_only(row: dict) -> str:
    """Return a task's question without the table's note after it (the note names the table and its headers, which
    every task on the table repeats): what the held-out gate's near-copy check compares."""
    return row["question"].split("\n", 1)[0]


def score(prediction, row, env) -> dict:
    """Return the SQL metrics of an episode (agentrl.envs.sql.env.sql_score)."""
    return sql_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="sql", summary="AgentBench DB Bench tasks in a SQLite (or MariaDB) sandbox with an execute_sql tool",
    build=build, rows=rows, settings=SQLSettings, env_class="agentrl.envs.sql.env:SQLEnv", score=score,
    prompts=PROMPTS,
    rewards={"sql_execution": 1.0, "format": 0.1}, reward_metrics={"sql_execution": "exec", "sql_answer": "em",
                                                          "sql_overlap": "overlap"},
    metrics=("exec",), demo_items=12, folder=__name__, near_text=question_only,
    metrics_note="`acc`/`em`/`f1` are the headline: AgentBench's verdict on the `<answer>` (SELECT) or on the final "
                 "table (INSERT/UPDATE/DELETE). `result_match` asks something else: whether a SELECT the agent ran "
                 "returned exactly the label values from the task's table (SELECT tasks only: write tasks are 0 "
                 "there, `state_match` scores them). The oracle runs the task's gold SQL and answers with the label, "
                 "and DB Bench's gold SQL often does not return its label (a COUNT of 2 for a label of 17), so the "
                 "oracle is right by `acc` with `result_match` 0. `exec` is execution match with partial credit.")
