"""The SQL environment: DB Bench tasks on per-episode SQLite databases in a sandbox, scoring, rewards, GRPO."""

import json
import os
import time

import pytest

from agentrl.envs.sql.dbbench import answer_matches, load_dbbench
from agentrl.envs.sql.env import SQLEnv, sql_score
from agentrl.envs.sql.lex import mysql_to_sqlite
from agentrl.envs.sql.sandbox import SQLLimits, build_database, quote
from agentrl.rollout.rewards import reward_registry
from conftest import DBBENCH, said

sql_answer = reward_registry()["sql_answer"]
sql_execution = reward_registry()["sql_execution"]

# SELECT tasks whose gold query (AgentBench's `sql.query`) does not reproduce the label in SQLite. None is a
# dialect gap left unhandled: the first eight do not run in MySQL either (syntax errors, unknown columns or
# tables in the dataset's query); the last six run but return something else than the label. AgentBench scores
# SELECT tasks by the label, and so does SQLEnv.
GOLD_DOES_NOT_RUN = {"db_0", "db_2", "db_6", "db_8", "db_11", "db_13", "db_18", "db_19"}
GOLD_DISAGREES_WITH_LABEL = {"db_1", "db_5", "db_10", "db_12", "db_15", "db_17"}
# db_9's label is ['none']: its gold query returns no rows, which any query can; an empty result depends on no data,
# so it earns no execution match (agentrl.envs.sql.credit)
EMPTY_RESULT = {"db_9"}


@pytest.fixture(scope="module")
def tasks():
    return load_dbbench(DBBENCH)


def test_dev_split_loads_with_select_and_modify_kinds(tasks):
    kinds = [t["metadata"]["kind"] for t in tasks]
    assert len(tasks) == 60 and kinds.count("select") == 20 and kinds.count("modify") == 40
    assert all(t["metadata"]["sql"] for t in tasks if t["metadata"]["kind"] == "modify")


def test_every_gold_statement_runs_in_sqlite_and_the_known_gaps_are_exactly_these(tasks):
    env = SQLEnv()
    errors, mismatches = set(), set()
    for t in tasks:
        env.reset(**t)
        meta = t["metadata"]
        out = said(env.execute_sql, meta["sql"])  # MySQL as written: the env rewrites what SQLite reads otherwise
        scores = sql_score(", ".join(map(str, meta["label"])) if meta["kind"] == "select" else "done", t, env)
        if meta["kind"] == "modify":
            assert not out.startswith("Error"), (t["id"], out)
            assert scores["state_match"] == 1.0, t["id"]
        elif out.startswith("Error"):
            errors.add(t["id"])
        elif not scores["result_match"]:
            mismatches.add(t["id"])
    assert errors == GOLD_DOES_NOT_RUN
    assert mismatches == GOLD_DISAGREES_WITH_LABEL | EMPTY_RESULT


def test_the_oracle_scores_one_on_every_dev_task(tasks, tmp_path):
    from agentrl.envs.sql import sql_task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    task = sql_task()
    metrics = run_batch(OraclePolicy(task.oracle_plan), task, tasks, tmp_path, RunConfig(progress=False))
    assert metrics["n"] == 60 and metrics["errors"] == 0
    assert metrics["overall"]["em"] == 1.0  # the headline: answer match (SELECT), final state (modify)
    # execution match is 1 wherever the gold statement reproduces the label; the oracle's query on the 14 known
    # gaps runs but returns something else, which earns the partial credit only
    gaps = GOLD_DOES_NOT_RUN | GOLD_DISAGREES_WITH_LABEL | EMPTY_RESULT
    recs = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()]
    assert {r["id"]: r["metrics"]["exec"] for r in recs} == {t["id"]: 0.1 if t["id"] in gaps else 1.0 for t in tasks}
    assert set(metrics["by_type"]) == {"INSERT", "UPDATE", "other", "counting", "comparison", "ranking",
                                       "aggregation-SUM", "aggregation-MAX", "aggregation-MIN", "aggregation-AVG"}


def test_mysql_backslash_escapes_become_sqlite_doubled_quotes():
    assert mysql_to_sqlite("WHERE Title = 'Don\\'t Cry'") == "WHERE Title = 'Don''t Cry'"


def test_identifiers_with_spaces_quotes_and_punctuation_are_quoted():
    table = {"table_name": "weird 'name' \"t\"", "table_info": {
        "columns": [{"name": "Year(s) won", "type": "TEXT"}, {"name": 'a"b', "type": "INT"},
                    {"name": "Date listed", "type": "DATE"}],
        "rows": [["1985, 1993", "3", "1990-01-02"], ["2001", "12", "2001-05-06"]]}}
    conn = build_database(table)
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table['table_name'])})")]
    types = [r[2] for r in conn.execute(f"PRAGMA table_info({quote(table['table_name'])})")]
    assert cols == ["Year(s) won", 'a"b', "Date listed"] and types == ["TEXT", "INTEGER", "TEXT"]
    won, ab, name = quote("Year(s) won"), quote('a"b'), quote(table["table_name"])
    got = conn.execute(f"SELECT {won} FROM {name} WHERE {ab} > 5")
    assert got.fetchall() == [("2001",)]


def test_text_columns_holding_numbers_compare_as_numbers_like_mysql():
    table = {"table_name": "Radio", "table_info": {"columns": [{"name": "MHz", "type": "TEXT"}],
                                                   "rows": [["99.5"], ["107.3"], ["107.9"]]}}
    conn = build_database(table)
    assert conn.execute("SELECT COUNT(*) FROM Radio WHERE MHz < 107.7").fetchone() == (2,)


def test_results_are_a_compact_table_with_caps_and_notes(tasks):
    env = SQLEnv(SQLLimits(max_rows=3, max_cell_chars=10))
    env.reset(**tasks[20])
    out = said(env.execute_sql, f"SELECT * FROM {quote(tasks[20]['metadata']['table']['table_name'])}")
    lines = out.splitlines()
    assert lines[0] == "School | Location | Date moved | Currently at this location"
    assert len(lines) == 5 and "more rows" in lines[-1] and "…" in out
    assert said(env.execute_sql, "SELECT 1 WHERE 0") == "(no rows) columns: 1"
    assert said(env.execute_sql, "SELECT nonsense FROM nowhere").startswith("Error: no such table")


HOSTILE = [
    ("drop the task table", "DROP TABLE {t}"),
    ("rename it", "ALTER TABLE {t} RENAME TO gone"),
    ("add a column", "ALTER TABLE {t} ADD COLUMN evil TEXT"),
    ("create a table", "CREATE TABLE evil (x)"),
    ("create a temp table", "CREATE TEMP TABLE evil (x)"),
    ("create a view", "CREATE VIEW evil AS SELECT 1"),
    ("create a trigger", "CREATE TRIGGER evil AFTER INSERT ON {t} BEGIN DELETE FROM {t}; END"),
    ("create an index", "CREATE INDEX evil ON {t} ({c})"),
    ("attach a file database", "ATTACH DATABASE '{tmp}/evil.db' AS evil"),
    ("attach a memory database", "ATTACH DATABASE ':memory:' AS evil"),
    ("detach main", "DETACH DATABASE main"),
    ("load an extension", "SELECT load_extension('{tmp}/evil.so')"),
    ("writable_schema", "PRAGMA writable_schema = ON"),
    ("lift the page cap", "PRAGMA max_page_count = 1000000000"),
    ("turn the journal off", "PRAGMA journal_mode = OFF"),
    ("rewrite the schema", "UPDATE sqlite_master SET sql = 'CREATE TABLE x (y)'"),
    ("empty the schema", "DELETE FROM sqlite_master"),
    ("vacuum into a file", "VACUUM INTO '{tmp}/evil.db'"),
    ("write a file", "SELECT writefile('{tmp}/evil.txt', 'x')"),
    ("analyze", "ANALYZE"),
    ("two statements at once", "SELECT 1; DROP TABLE {t}"),
    ("recursive CTE bomb", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"),
    ("huge cartesian join", "SELECT COUNT(*) FROM {t} a, {t} b, {t} c, {t} d, {t} e, {t} f, {t} g, {t} h"),
    ("billion-byte blob", "SELECT length(randomblob(1000000000))"),
    ("billion-byte zeroblob", "SELECT zeroblob(2000000000)"),
    ("very long string", "SELECT length(printf('%.*c', 500000000, 'x'))"),
    ("replace amplification", "SELECT length(replace(hex(zeroblob(50000)), '0', hex(zeroblob(50000))))"),
    ("row explosion insert", "INSERT INTO {t} SELECT a.* FROM {t} a, {t} b, {t} c, {t} d, {t} e, {t} f"),
    ("very long statement", "SELECT '" + "x" * 20000 + "'"),
    # issue 13: obfuscated ATTACH, PRAGMA variants, virtual tables, parser bombs, huge IN lists, NUL bytes, DDL
    ("attach in mixed case", "aTtAcH DATABASE ':memory:' AS evil"),
    ("attach behind comments", "/* x */ ATTACH /* y */ DATABASE '{tmp}/evil.db' AS evil"),
    ("attach without the keyword", "ATTACH '{tmp}/evil.db' AS evil"),
    ("attach a uri", "ATTACH DATABASE 'file:{tmp}/evil.db?mode=rwc' AS evil"),
    ("qualified writable_schema", "PRAGMA main.writable_schema = 1"),
    ("lower-case writable_schema", "pragma WRITABLE_SCHEMA=1"),
    ("temp_store", "PRAGMA temp_store = MEMORY"),
    ("query_only off", "PRAGMA query_only = 0"),
    ("schema_version", "PRAGMA schema_version = 5"),
    ("user_version", "PRAGMA user_version = 3"),
    ("cache_size", "PRAGMA cache_size = -1000000"),
    ("mmap_size", "PRAGMA mmap_size = 1000000000"),
    ("journal to WAL", "PRAGMA journal_mode = WAL"),
    ("qualified max_page_count", "PRAGMA main.max_page_count = 999999999"),
    ("lift the heap cap", "PRAGMA hard_heap_limit = 0"),
    ("soft heap limit", "PRAGMA soft_heap_limit = 0"),
    ("trusted_schema", "PRAGMA trusted_schema = 1"),
    ("foreign keys off", "PRAGMA foreign_keys = OFF"),
    ("fts5 virtual table", "CREATE VIRTUAL TABLE evil USING fts5(x)"),
    ("rtree virtual table", "CREATE VIRTUAL TABLE evil USING rtree(id, a, b)"),
    ("temp view", "CREATE TEMP VIEW evil AS SELECT 1"),
    ("write the temp schema", "INSERT INTO sqlite_temp_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x(y)')"),
    ("replace into the schema", "REPLACE INTO sqlite_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x(y)')"),
    ("parser stack bomb", "SELECT " + "(" * 3000 + "1" + ")" * 3000),
    ("huge IN list", "SELECT 1 WHERE 1 IN (" + ",".join(str(i) for i in range(5000)) + ")"),
    ("NUL byte then a drop", "SELECT 1\x00; DROP TABLE {t}"),
    ("NUL byte at the end", "SELECT {c} FROM {t}\x00"),
    ("drop if exists", "DROP TABLE IF EXISTS {t}"),
    ("rename a column", "ALTER TABLE {t} RENAME COLUMN {c} TO evil"),
    ("drop a column", "ALTER TABLE {t} DROP COLUMN {c}"),
    ("unique index", "CREATE UNIQUE INDEX evil ON {t} ({c})"),
    ("vacuum", "VACUUM"),
    ("detach temp", "DETACH temp"),
    ("load libc", "SELECT load_extension('libc.so.6')"),
    ("fts3 tokenizer pointer", "SELECT fts3_tokenizer('simple')"),
    ("savepoint then drop", "SAVEPOINT a; DROP TABLE {t}"),
    ("recursive insert flood", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                               "INSERT INTO {t} ({c}) SELECT x FROM r"),
]


@pytest.mark.parametrize("name,template", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_statements_leave_the_sandbox_intact_and_the_env_serving(tasks, tmp_path, name, template):
    task = tasks[40]  # an UPDATE task: writing rows of its own table is allowed, nothing else is
    table = task["metadata"]["table"]
    t, c = quote(table["table_name"]), quote(table["table_info"]["columns"][0]["name"])
    env = SQLEnv()
    env.reset(**task)
    before_rows = said(env.execute_sql, f"SELECT COUNT(*) FROM {t}")
    before_schema = said(env.execute_sql, "SELECT type, name, sql FROM sqlite_master")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        out = said(env.execute_sql, template.format(t=t, c=c, tmp=tmp_path))
    finally:
        os.chdir(cwd)
    assert out.startswith("Error:"), f"{name}: {out[:200]}"
    if "CTE" in name or "cartesian" in name or "explosion" in name or "flood" in name:
        assert "time limit" in out or "full" in out
    assert said(env.execute_sql, f"SELECT COUNT(*) FROM {t}") == before_rows
    assert said(env.execute_sql, "SELECT type, name, sql FROM sqlite_master") == before_schema
    assert list(tmp_path.iterdir()) == []  # no file was written anywhere we pointed it
    assert said(env.execute_sql, f"SELECT {c} FROM {t} LIMIT 1").count("\n") == 1  # still serving


def test_allowed_writes_only_touch_the_task_table(tasks):
    task = tasks[40]
    env = SQLEnv()
    env.reset(**task)
    t = quote(task["metadata"]["table"]["table_name"])
    assert said(env.execute_sql, f"DELETE FROM {t} WHERE 0").startswith("OK (0 rows")
    assert "transaction control" in said(env.execute_sql, "BEGIN")
    assert "transaction control" in said(env.execute_sql, "ROLLBACK")
    assert said(env.execute_sql, "PRAGMA table_info(" + t + ")").startswith("cid | name")


def test_sql_rewards_and_metrics_on_hand_made_episodes(tasks):
    select = next(t for t in tasks if t["id"] == "db_4")  # COUNT ... -> label ['1.0']
    update = tasks[40]
    t_sel = quote(select["metadata"]["table"]["table_name"])

    def episode(task, statements, answer, **env_kw):
        env = SQLEnv(**env_kw)
        env.reset(**task)
        for s in statements:
            said(env.execute_sql, s)
        return env, [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]

    cases = [
        (select, [mysql_to_sqlite(select["metadata"]["sql"])], "1", 1.0, 1.0),  # right (1 == 1.0)
        (select, [mysql_to_sqlite(select["metadata"]["sql"])], "7", 1.0, 0.0),  # right result, wrong answer
        (select, [f"SELECT COUNT(*) FROM {t_sel}"], "24", 0.1, 0.0),  # ran, wrong result and answer
        (select, [f"SELECT COUNT(*) FROM {t_sel}"], "1", 0.1, 1.0),  # wrong result, right answer
        (select, ["SELECT nothing FROM nowhere"], "1", 0.0, 1.0),  # answer right although the query failed
        (select, ["SELECT nothing FROM nowhere"], "3", 0.0, 0.0),  # only errors, wrong
        (select, [], "1", 0.0, 1.0),  # right answer without running anything: no execution credit
        (select, [], "", 0.0, 0.0),  # did nothing
        (update, [mysql_to_sqlite(update["metadata"]["sql"])], "done", 1.0, 1.0),  # right final state
        # a change that does not move the table toward the gold one earns nothing (it earned 0.1 before)
        (update, [f"UPDATE {quote(update['metadata']['table']['table_name'])} SET Wins = '9'"], "done", 0.0, 0.0),
    ]
    for task, statements, answer, exec_score, em in cases:
        env, completion = episode(task, statements, answer)
        assert sql_execution(None, [completion], environments=[env]) == [exec_score], (statements, answer)
        assert sql_answer(None, [completion], environments=[env]) == [em]
    assert sql_execution(None, [[]], environments=[object()]) == [None]  # not a SQL episode


def test_jaccard_partial_credit_is_optional(tasks):
    task = next(t for t in tasks if t["id"] == "db_7")  # label: two scores
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    t = quote(task["metadata"]["table"]["table_name"])
    said(env.execute_sql, f"SELECT Score FROM {t} WHERE Score = '1–0' LIMIT 1")
    completion = [{"role": "assistant", "content": "<answer>1–0</answer>"}]
    assert sql_execution(None, [completion], environments=[env]) == [0.5]  # {1–0} vs {1–0, 2–0}
    env = SQLEnv()
    env.reset(**task)
    said(env.execute_sql, f"SELECT Score FROM {t} WHERE Score = '1–0' LIMIT 1")
    assert sql_execution(None, [completion], environments=[env]) == [0.1]  # off by default: the flat credit


def test_partial_credit_and_jaccard_reach_the_env_from_the_preset(tasks):
    from agentrl.core.validate import from_dict
    from agentrl.rollout.evaluate import EvalConfig, build_task
    from agentrl.train import grpo
    from agentrl.train.configs import GRPOSettings

    task = next(t for t in tasks if t["id"] == "db_7")
    t = quote(task["metadata"]["table"]["table_name"])
    completion = [{"role": "assistant", "content": "<answer>1–0</answer>"}]
    for sql, partial, jaccard in [
        (build_task(from_dict(EvalConfig, {"env": "sql", "sql": {"partial_credit": 0.25}}, "eval")), 0.25, False),
        (build_task(from_dict(EvalConfig, {"env": "sql", "sql": {"partial_credit": 0.25, "jaccard": True}}, "eval")),
         0.25, True),
        (grpo.build_task(GRPOSettings.of(env="sql", sql={"partial_credit": 0.0})), 0.0, False),  # [grpo.sql]
    ]:
        assert sql.config["partial_credit"] == partial and sql.config["jaccard"] is jaccard
        env = sql.make_env()
        env.reset(**task)
        said(env.execute_sql, f"SELECT COUNT(*) FROM {t}")  # runs, wrong result: the flat credit
        assert sql_execution(None, [completion], environments=[env]) == [partial]
        said(env.execute_sql, f"SELECT Score FROM {t} WHERE Score = '1–0' LIMIT 1")  # half the rows
        assert sql_execution(None, [completion], environments=[env]) == [0.5 if jaccard else partial]


def _long_table_task(n: int) -> dict:
    table = {"table_name": "Long", "table_info": {"columns": [{"name": "n", "type": "INT"}],
                                                  "rows": [[str(i)] for i in range(n)]}}
    return {"id": "long", "question": "all n", "golden_answers": [str(i) for i in range(n)],
            "metadata": {"kind": "select", "type": "other", "table": table, "sql": "SELECT n FROM Long",
                         "label": [str(i) for i in range(n)]}}


def test_results_longer_than_the_rows_shown_are_scored_in_full():
    task = _long_table_task(30)
    answer = json.dumps(task["metadata"]["label"])  # several values: a list, as AgentBench reads them
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    out = said(env.execute_sql, "SELECT n FROM Long")
    assert len(out.splitlines()) == 1 + 20 + 1 and "more rows" in out  # the model sees 20 rows
    scores = sql_score(answer, task, env)
    assert scores["result_match"] == 1.0 and scores["exec"] == 1.0 and scores["em"] == 1.0
    said(env.execute_sql, "SELECT n FROM Long WHERE n < 27")  # a later query does not take the credit back
    assert sql_score(answer, task, env)["exec"] == 1.0
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    said(env.execute_sql, "SELECT n FROM Long WHERE n < 27")  # 27 of 30 values, past the 20 shown
    assert sql_score(answer, task, env)["exec"] == 0.9
    # a result longer than the scoring cap never matches (its end was not read), and the fetch stops there
    env = SQLEnv(SQLLimits(max_scored_rows=25))
    env.reset(**task)
    assert "more rows" in said(env.execute_sql, "SELECT n FROM Long")
    assert sql_score(answer, task, env)["exec"] == 0.1
    env = SQLEnv()
    env.reset(**task)
    # (each query also reads the task's table: only such results are scored)
    out = said(env.execute_sql, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                          "SELECT x FROM c WHERE (SELECT min(n) FROM Long) IS NOT NULL")
    assert "more rows" in out and len(env._selects[-1].values) == SQLLimits().max_scored_rows
    out = said(env.execute_sql, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                          "SELECT randomblob(90000) FROM c WHERE (SELECT min(n) FROM Long) IS NOT NULL")  # wide rows
    assert not out.startswith("Error") and len(env._selects[-1].values) == SQLLimits().max_rows  # (the rows shown)
    # a slow result: the deadline comes while fetching the scored rows, after the rows to show (20 rows take
    # ~0.01 s, 10,000 take seconds: the margin holds on a loaded machine and on a fast one)
    start = time.monotonic()
    out = said(env.execute_sql, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                          "SELECT x FROM c WHERE (SELECT min(n) FROM Long) IS NOT NULL AND x % 1000 = 0")
    assert time.monotonic() - start < 4.0 and not out.startswith("Error") and "more rows" in out
    assert 20 <= len(env._selects[-1].values) < SQLLimits().max_scored_rows


@pytest.mark.parametrize("answer", ["1e999", "-1e999", "nan", "NaN", "inf", "1e400, nan"])
def test_overflowing_and_nan_answers_are_compared_as_text_not_crash(tasks, answer):
    select = next(t for t in tasks if t["id"] == "db_4")
    env = SQLEnv()
    env.reset(**select)
    table = quote(select["metadata"]["table"]["table_name"])
    said(env.execute_sql, f"SELECT 1e999, -1e999 FROM {table} LIMIT 1")  # SQLite returns float inf: must normalise too
    completion = [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]
    assert sql_answer(None, [completion], environments=[env]) == [0.0]
    assert sql_execution(None, [completion], environments=[env]) == [0.1]
    assert answer_matches(answer, [answer]) and not answer_matches(answer, ["1"])


def test_answers_match_on_normalised_values():
    assert answer_matches("K255AZ, K228EE", ["K228EE", "K255AZ"])
    assert answer_matches("1", ["1.0"]) and answer_matches("32502", ["32502.0"])
    assert answer_matches("1985, 1993", ["1985, 1993"])  # a value with a comma in it
    assert answer_matches("None", ["none"]) and not answer_matches("Giza", ["Cairo"])
    assert not answer_matches(None, ["x"])


def test_synthetic_training_tasks_are_solved_by_their_gold_sql():
    from agentrl.envs.sql.synthetic import synthetic_sql_tasks

    rows = synthetic_sql_tasks(6, seed=3)
    assert len(rows) == 42 and all(r["metadata"]["source"] == "synthetic" for r in rows)
    env = SQLEnv()
    for r in rows:
        env.reset(**r)
        assert not said(env.execute_sql, r["metadata"]["sql"]).startswith("Error")
        answer = ", ".join(map(str, r["metadata"]["label"])) if r["metadata"]["kind"] == "select" else "done"
        assert sql_score(answer, r, env)["exec"] == 1.0


def test_another_synthetic_seed_gives_a_training_pool_disjoint_from_the_default_one():
    from agentrl.envs import registry
    from agentrl.envs.sql import SQLSettings

    spec = registry.get("sql")
    default = registry.split_rows(spec, "train", SQLSettings(validation=8))
    other = registry.split_rows(spec, "train", SQLSettings(synthetic_seed=1, validation=8))
    val = registry.split_rows(spec, "validation", SQLSettings(synthetic_seed=1, validation=8))
    assert len(default) == len(other) == 132 and len(val) == 8 and other[0]["id"] == "syn1_0_0"
    assert not {r["id"] for r in default} & {r["id"] for r in other + val}
    questions = {r["question"] for r in default}
    assert sum(r["question"] in questions for r in other) < 5  # other tables: other names, headers and rows
    assert {r["id"] for r in registry.split_rows(spec, "train", SQLSettings())} >= {r["id"] for r in default}


def test_the_oracle_scores_one_on_every_synthetic_task_kind(tmp_path):
    from agentrl.envs.sql import sql_task
    from agentrl.envs.sql.synthetic import synthetic_sql_tasks
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    rows = synthetic_sql_tasks(30, seed=11)
    task = sql_task()
    metrics = run_batch(OraclePolicy(task.oracle_plan), task, rows, tmp_path, RunConfig(progress=False))
    assert metrics["n"] == 210 and metrics["errors"] == 0
    assert set(metrics["by_type"]) >= {"other", "counting", "comparison", "ranking", "UPDATE", "INSERT"}
    assert any(t.startswith("aggregation-") for t in metrics["by_type"])
    assert len({r["metadata"]["table"]["table_name"] for r in rows}) > 20  # varied names, not three fixed tables
    assert all(r["metadata"]["label"] for r in rows if r["metadata"]["kind"] == "select")
    assert all(m["exec"] == 1.0 and m["em"] == 1.0 for m in metrics["by_type"].values()), metrics["by_type"]
    kind = {r["id"]: r["metadata"]["kind"] for r in rows}
    recs = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()]
    assert all(r["metrics"]["state_match"] == 1.0 for r in recs if kind[r["id"]] == "modify")
    assert all(r["metrics"]["result_match"] == 1.0 for r in recs if kind[r["id"]] == "select")
    # UPDATEs that set several columns, or name the row by two of its cells, are scored like the plain ones
    updates = [r["metadata"]["sql"] for r in rows if r["metadata"]["type"] == "UPDATE"]
    assert any(", " in u.split(" WHERE ")[0] for u in updates) and any(" AND " in u for u in updates)


def test_cli_eval_on_sql_tasks_with_the_oracle(tmp_path, capsys, monkeypatch):
    from agentrl.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--env", "sql", "--policy", "oracle", "--qa", str(DBBENCH), "--limit", "6", "--name", "s",
                 "--overwrite"]) == 0
    out = capsys.readouterr().out
    assert "6 items, 0 errors" in out and "exec" in out
    recs = [json.loads(line) for line in (tmp_path / "runs/eval/s/trajectories.jsonl").open()]
    assert all(r["env"] == "sql" and r["metrics"]["em"] == 1.0 for r in recs)
    assert recs[0]["messages"][2]["tool_calls"][0]["function"]["name"] == "execute_sql"


@pytest.mark.slow
def test_grpo_smoke_run_on_synthetic_sql_tasks(trained, tiny_model, tmp_path):
    from agentrl.core.heldout import HeldOut
    from agentrl.rollout.runner import RunConfig
    from agentrl.train.configs import GRPOSettings
    from agentrl.train.grpo import run_grpo

    cfg = GRPOSettings.of(name="sql", env="sql", model={"name": str(tiny_model)}, adapter=str(trained.out / "adapter"),
                          sql={"train_qa": "synthetic", "train": 24, "rewards": {"sql_execution": 1.0, "format": 0.1}},
                          num_generations=4, per_device_train_batch_size=8, max_steps=2, learning_rate=3e-4,
                          lr_scheduler_type="constant", optim="adamw_torch", gradient_checkpointing=False,
                          logging_steps=1, max_completion_length=192, max_tool_calling_iterations=2, eval_questions=2,
                          report_to=[], log_completions=False)
    result = run_grpo(cfg, HeldOut(), runs=tmp_path, eval_run=RunConfig(progress=False))
    assert result.metrics["steps"] == 2 and result.metrics["reward_funcs"] == ["sql_execution", "format"]
    assert all("rewards/sql_execution" in h for h in result.metrics["history"])
    assert result.metrics["evals"][-1]["n"] == 2 and "exec" in result.metrics["evals"][-1]


def test_grpo_sql_credit_settings_reach_the_training_environment_and_eval_settings_stay_in_eval():
    from agentrl.app.presets import load
    from agentrl.train.configs import GRPOSettings
    from agentrl.train.grpo import build_task

    env = build_task(GRPOSettings.of(env="sql", sql={"partial_credit": 0.3, "jaccard": True}), {}).make_env()
    assert (env._partial, env._jaccard) == (0.3, True)
    # [eval.sql] configures evaluation only: GRPO reads [grpo.sql] (its defaults when there is none)
    preset = load(None, form={"grpo": {"env": "sql"}, "eval": {"env": "sql", "sql": {"partial_credit": 0.05}}})
    env = build_task(preset.grpo(), preset.data).make_env()
    assert (env._partial, env._jaccard) == (0.1, False)
    assert preset.eval().env_settings.partial_credit == 0.05


def test_transaction_control_is_refused_so_a_rolled_back_write_never_counts(tasks):
    task = tasks[40]  # an UPDATE task
    t = quote(task["metadata"]["table"]["table_name"])
    env = SQLEnv()
    env.reset(**task)
    before = said(env.execute_sql, f"SELECT * FROM {t}")
    for statement in ("BEGIN", "begin transaction", "/* x */ SAVEPOINT a", "RELEASE a", "ROLLBACK", "COMMIT", "END"):
        assert "transaction control" in said(env.execute_sql, statement), statement
    # BEGIN; <gold UPDATE>; ROLLBACK: the UPDATE commits on its own and the ROLLBACK is refused, so the score is the
    # table's real state (before the fix the table was unchanged and AgentBench's hash still said 1.0)
    assert said(env.execute_sql, task["metadata"]["sql"]).startswith("OK (1 row")
    assert said(env.execute_sql, "ROLLBACK").startswith("Error")
    assert said(env.execute_sql, f"SELECT * FROM {t}") != before
    scores = sql_score("done", task, env)
    assert scores["agentbench"] == scores["state_match"] == 1.0
    env.reset(**task)  # the next episode starts from the task's table
    assert said(env.execute_sql, f"SELECT * FROM {t}") == before


def test_the_synthetic_training_tasks_have_db_bench_dev_shape_within_twenty_percent_on_every_feature():
    # the tables SFT (seed 0) and GRPO (seed 1) train on, against the held-out file, by the benchmark's own features
    # (words and marks for the statement length: the tokenizer is not needed to compare shapes)
    import importlib.util
    import re

    from agentrl.envs.sql.dbbench import load_dbbench
    from agentrl.envs.sql.synthetic import synthetic_sql_tasks

    bench = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "sql_shape.py")
    spec = importlib.util.spec_from_file_location("sql_shape", bench)
    shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shape)
    words = lambda s: len(re.findall(r"\w+|[^\w\s]", s))  # noqa: E731
    theirs = shape.features(load_dbbench(DBBENCH), words)
    for seed in (0, 1):
        ours = shape.features(synthetic_sql_tasks(20, seed=seed), words)
        off = {k: round(v / theirs[k], 2) for k, v in ours.items() if theirs[k] and not 0.8 <= v / theirs[k] <= 1.25}
        assert not off, (seed, off)
        assert ours["DELETE tasks"] == theirs["DELETE tasks"] == 0
