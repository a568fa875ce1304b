"""sql: database questions and edits with one tool, ``execute_sql(query)``, scored by AgentBench's rules on a
per-episode SQLite database or a private MariaDB server (README.md beside this file)."""

from __future__ import annotations

from agentrl.envs.registry import Environment

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


def sql_task(*, prompt: str | None = None, max_calls: int = 8, partial_credit: float = 0.1, jaccard: bool = False,
             scoring: str = "agentbench", backend: str = "sqlite"):
    """Return the SQL Task over per-episode databases: SQLite in-process (the default) or a MariaDB server
    (DataError when it is not installed). ``scoring`` picks the headline em: AgentBench's rules (default) or the
    lenient normalised match."""
    import functools

    from agentrl.core.io import DataError
    from agentrl.envs import registry
    from agentrl.envs.sql.env import SQLEnv, sql_score
    from agentrl.envs.task import Task

    if backend == "mariadb":
        from agentrl.envs.sql import mariadb, mariadb_server

        mariadb_server.binaries()  # fail before the first item, naming the package to install
        cls, plan = mariadb.MariaDBEnv, mariadb.oracle_plan
        prompt = "sql_mysql" if prompt in (None, "sql") else prompt
    elif backend == "sqlite":
        from agentrl.envs.sql.oracle import oracle_plan

        cls, plan = SQLEnv, oracle_plan
        prompt = prompt or "sql"
    else:
        raise DataError(f"unknown SQL backend '{backend}' (choose from sqlite, mariadb)")
    env = functools.partial(cls, max_calls=max_calls, partial_credit=partial_credit, jaccard=jaccard, scoring=scoring)
    return Task(name=ENVIRONMENT.name, make_env=env,
                system_prompt=registry.prompt(ENVIRONMENT, prompt, max_calls=max_calls),
                oracle_plan=plan, score=sql_score,
                config={"prompt": prompt, "max_calls": max_calls, "partial_credit": partial_credit, "jaccard": jaccard,
                        "scoring": scoring, "backend": backend})


def build(settings, preset: dict | None = None):
    """Return the SQL Task for ``settings`` (tool-call budget ``max_searches``, the ``sql_*`` keys)."""
    return sql_task(prompt=settings.prompt, max_calls=settings.max_searches, partial_credit=settings.sql_partial_credit,
                    jaccard=settings.sql_jaccard, scoring=settings.sql_scoring, backend=settings.sql_backend)


def rows(split: str, source: str | None = None, n: int | None = None, preset: dict | None = None) -> list[dict]:
    """Return SQL task rows: ``train`` the synthetic tasks (DB Bench is evaluation only: a DB Bench file as a
    training source is a DataError), ``eval`` and ``heldout`` DB Bench dev; ``source`` a DB Bench-layout file or
    ``synthetic``."""
    from agentrl.core.config import data_file
    from agentrl.core.io import DataError

    source = source or (SYNTHETIC if split == "train" else DBBENCH_DEV)
    if source == SYNTHETIC:
        from agentrl.envs.sql.synthetic import synthetic_sql_tasks

        return synthetic_sql_tasks()
    if split == "train" and "dbbench" in str(source).lower():
        raise DataError(f"qa = {source!r}: DB Bench is for evaluation only; train on qa = '{SYNTHETIC}'")
    from agentrl.envs.sql.dbbench import load_dbbench

    return load_dbbench(data_file(source))


def score(prediction, row, env) -> dict:
    """Return the SQL metrics of an episode (agentrl.envs.sql.env.sql_score)."""
    from agentrl.envs.sql.env import sql_score

    return sql_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="sql", summary="AgentBench DB Bench tasks in a SQLite (or MariaDB) sandbox with an execute_sql tool",
    build=build, rows=rows, env_class="agentrl.envs.sql.env:SQLEnv", score=score, prompts=PROMPTS,
    rewards={"sql_execution": 1.0, "format": 0.1}, reward_metrics={"sql_execution": "exec", "sql_answer": "em"},
    metrics=("exec",), demo_items=12, folder=__name__,
    metrics_note="`acc`/`em`/`f1` are the headline: AgentBench's verdict on the `<answer>` (SELECT) or on the final "
                 "table (INSERT/UPDATE/DELETE). `result_match` asks something else: whether a SELECT the agent ran "
                 "returned exactly the label values from the task's table (SELECT tasks only: write tasks are 0 "
                 "there, `state_match` scores them). The oracle runs the task's gold SQL and answers with the label, "
                 "and DB Bench's gold SQL often does not return its label (a COUNT of 2 for a label of 17), so the "
                 "oracle is right by `acc` with `result_match` 0. `exec` is execution match with partial credit.")
