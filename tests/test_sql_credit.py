"""SQL scoring on hand-made episodes (real SQLite): exec credit only for results that depend on the table's data,
partial credit only toward the gold table, AgentBench's table hash as MySQL would compute it, the expected hash from
the gold statement, unscorable tasks with their reason, and scoring bounded by the item timeout."""

import hashlib
import json
import time

import pytest

from agentrl.envs.sql.agentbench import table_hash
from agentrl.envs.sql.dbbench import dbbench_row
from agentrl.envs.sql.env import SQLEnv, sql_score
from agentrl.envs.sql.lex import mysql_to_sqlite
from agentrl.envs.sql.sandbox import SQLLimits, quote
from conftest import running, said

COLUMNS = [{"name": "City", "type": "TEXT"}, {"name": "Country", "type": "TEXT"},
           {"name": "Population", "type": "INT"}, {"name": "Area", "type": "FLOAT"}]
ROWS = [["Arden", "Norland", "120000", "7.400"], ["Brisa", "Sudria", "95000", "12.50"],
        ["Calder", "Norland", "300000", "20.0"], ["Montréal", "Estmark", "1700000", "431.50"],
        ["Dunmore", "Sudria", "9", "1"]]
TABLE = {"table_name": "Cities", "table_info": {"columns": COLUMNS, "rows": ROWS}}


def select_task(label: list, sql: str = "SELECT 1") -> dict:
    return dbbench_row({"description": "q", "label": label, "table": TABLE, "type": ["other"],
                        "sql": {"query": sql}}, "sel")


def modify_task(gold: str, expected_rows: list | None = None, kind: str = "UPDATE", table: dict = TABLE) -> dict:
    """A write task; ``expected_rows`` (text, as AgentBench's MySQL holds them) give its answer_md5, else none."""
    md5 = None if expected_rows is None else f"[('{table_hash(expected_rows)}',)]"
    return dbbench_row({"description": "q", "label": [gold], "table": table, "type": [kind], "answer_md5": md5}, "mod")


def episode(task: dict, *statements: str, answer: str = "done", **env_kw) -> dict:
    env = SQLEnv(**env_kw)
    env.reset(**task)
    for s in statements:
        assert not said(env.execute_sql, s).startswith("Error"), s
    return sql_score(answer, task, env)


# ----------------------------------------------------------------------------- exec credit needs the table's data


@pytest.mark.parametrize("label,query", [
    (["5"], "SELECT COUNT(*) FROM Cities"),  # changes when the rows are duplicated
    (["Norland"], "SELECT Country FROM Cities WHERE City = 'Arden'"),  # changes when the values are scrambled
    (["1700000"], "SELECT MAX(Population) FROM Cities"),
    (["3"], "SELECT COUNT(DISTINCT Country) FROM Cities"),  # changes when every other row is dropped
])
def test_a_query_that_reads_the_answer_from_the_table_earns_exec_credit(label, query):
    for jaccard in (False, True):
        scores = episode(select_task(label), query, answer=label[0], jaccard=jaccard)
        assert scores["exec"] == scores["result_match"] == 1.0, (query, jaccard)


@pytest.mark.parametrize("query", [
    "SELECT 'Norland' FROM Cities WHERE City IS NOT NULL LIMIT 1",  # a literal gated by FROM: it read the table
    "SELECT DISTINCT 'Norland' FROM Cities",
    "SELECT 'Norland' FROM Cities ORDER BY random() LIMIT 1",
])
def test_a_literal_that_merely_touches_the_table_earns_only_the_flat_partial_credit(query):
    for jaccard in (False, True):  # the Jaccard overlap of {'Norland'} with the label would be 1.0
        scores = episode(select_task(["Norland"]), query, answer="Norland", jaccard=jaccard)
        assert scores["result_match"] == 0.0 and scores["exec"] == 0.1, (query, jaccard)
        assert scores["agentbench"] == 1.0  # the answer itself is still scored as AgentBench scores it


def test_an_answer_written_into_the_table_and_read_back_earns_no_exec_credit():
    scores = episode(select_task(["Norland"]), "INSERT INTO Cities (City, Country) VALUES ('Zed', 'Norland')",
                     "SELECT Country FROM Cities WHERE City = 'Zed'")
    assert scores["result_match"] == 0.0 and scores["exec"] == 0.1


# ----------------------------------------------------------------------------- partial credit toward the gold table


def test_partial_credit_on_a_write_task_only_for_moving_the_table_toward_the_gold_one():
    task = modify_task("DELETE FROM Cities WHERE Country = 'Sudria'", kind="DELETE")
    assert episode(task, "DELETE FROM Cities WHERE Country = 'Sudria'")["exec"] == 1.0
    assert episode(task, "DELETE FROM Cities WHERE City = 'Brisa'")["exec"] == 0.1  # one of the two rows
    assert episode(task, "DELETE FROM Cities")["exec"] == 0.0  # a change, away from the gold table
    assert episode(task, "DELETE FROM Cities WHERE City = 'Arden'")["exec"] == 0.0  # the wrong row
    assert episode(task, "UPDATE Cities SET Area = '1' WHERE 0")["exec"] == 0.0  # no change
    # Jaccard to the gold table 3/5 -> 3/4: (0.75 - 0.6) / (1 - 0.6) of the way
    assert episode(task, "DELETE FROM Cities WHERE City = 'Brisa'", jaccard=True)["exec"] == pytest.approx(0.375)


# ----------------------------------------------------------------------------- AgentBench's hash as MySQL makes it


def rows_after(change) -> list:
    return change([list(r) for r in ROWS])


def _set(rows, city, column, value):
    i = [c["name"] for c in COLUMNS].index(column)
    for r in rows:
        if r[0] == city:
            r[i] = value
    return rows


@pytest.mark.parametrize("gold,change", [
    # typed columns keep the text MySQL's TEXT columns hold ('7.400', '12.50', '20.0' were '7.4', '12.5', '20')
    ("UPDATE Cities SET Country = 'Westerra' WHERE City = 'Brisa'", lambda r: _set(r, "Brisa", "Country", "Westerra")),
    # MySQL string escapes: \n is a newline, \t a tab, \\ a backslash, \' a quote
    ("INSERT INTO Cities VALUES ('Formby\\nUrban\\t\\\\\\'s', 'Norland', '4,567', '1.0')",
     lambda r: r + [["Formby\nUrban\t\\'s", "Norland", "4,567", "1.0"]]),
    # MySQL's collation is case- and accent-insensitive: 'montreal' finds 'Montréal'
    ("UPDATE Cities SET Population = '1800000' WHERE City = 'montreal'",
     lambda r: _set(r, "Montréal", "Population", "1800000")),
    # a TEXT column compared with a number compares as numbers ('95000' > '100000' as text, not as numbers)
    ("UPDATE Cities SET Country = 'Big' WHERE Population > 100000",
     lambda r: [_set(r, c, "Country", "Big") for c in ("Arden", "Calder", "Montréal")][-1]),
    # a number written into a column keeps its text: 5.50 is '5.50' (SQLite would store 5.5)
    ("UPDATE Cities SET Area = 5.50, Population = 007 WHERE City = 'Arden'",
     lambda r: _set(_set(r, "Arden", "Area", "5.50"), "Arden", "Population", "7")),
])
def test_the_table_hash_is_taken_as_mysql_would_hold_the_table(gold, change):
    task = modify_task(gold, rows_after(change))
    scores = episode(task, gold)
    assert scores["agentbench"] == 1.0 and scores["em"] == 1.0, gold
    assert episode(task, "UPDATE Cities SET Area = '2' WHERE City = 'Dunmore'")["agentbench"] == 0.0


def test_group_concat_is_cut_at_1024_characters_as_mysqls_is():
    rows = [(f"row {i}",) for i in range(200)]  # 200 row hashes of 5 characters + commas: 1199 characters
    joined = ",".join(sorted(hashlib.md5(r[0].encode()).hexdigest()[:5] for r in rows))
    assert len(joined) > 1024 and table_hash(rows) == hashlib.md5(joined[:1024].encode()).hexdigest()
    assert table_hash(rows[:100]) == hashlib.md5(",".join(sorted(
        hashlib.md5(r[0].encode()).hexdigest()[:5] for r in rows[:100])).encode()).hexdigest()


def test_mysql_string_escapes_are_translated_inside_literals_only():
    sql = r"SELECT 'a\nb\tc\\d\'e\"f\Zg\%h\_i\rj\bk\xl', `a\n`, [b\n], 'it''s' -- don\'t"
    out = mysql_to_sqlite(sql)
    assert out.startswith("SELECT 'a\nb\tc\\d''e\"f\x1ag\\%h\\_i\rj\bkxl', `a\\n`, [b\\n], 'it''s' -- don\\'t")
    assert mysql_to_sqlite(r"SELECT 'a\0b'") == "SELECT ('a' || char(0) || 'b')"
    assert mysql_to_sqlite("SELECT 'open") == "SELECT 'open"  # left for SQLite to report
    assert mysql_to_sqlite('SELECT "x\\"y" # c', double_quoted_strings=True) == 'SELECT "x""y" -- c'


# ----------------------------------------------------------------------------- the gold statement's hash, unscorable


def test_a_write_task_without_answer_md5_is_scored_against_the_gold_statements_hash():
    task = modify_task("UPDATE Cities SET Area = 5.50 WHERE City = 'Arden'")
    assert task["metadata"]["answer_md5"] is None
    right = episode(task, "UPDATE Cities SET Area = '5.50' WHERE City = 'Arden'")
    assert right["agentbench"] == right["em"] == 1.0 and right["unscorable"] == 0.0
    # '5.5' is the same number (the lenient state match), but not the text MySQL would hold: AgentBench says no
    wrong = episode(task, "UPDATE Cities SET Area = '5.5' WHERE City = 'Arden'")
    assert wrong["agentbench"] == wrong["em"] == 0.0 and wrong["state_match"] == 1.0


def test_a_failing_gold_statement_is_reported_with_its_reason(tmp_path, capsys, monkeypatch):
    from agentrl.cli import main

    rec = {"description": "q", "label": ["UPDATE Nowhere SET x = 1"], "table": TABLE, "type": ["UPDATE"]}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    task = dbbench_row(rec, "db_0")
    env = SQLEnv()
    env.reset(**task)
    assert sql_score("done", task, env)["unscorable"] == 1.0
    assert env._score_notes()["unscorable_reason"] == "the gold statement fails on SQLite: no such table: Nowhere"
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--env", "sql", "--policy", "oracle", "--qa", str(path), "--name", "u", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "1 of 1 items could not be scored" in err and "no such table: Nowhere (1)" in err
    (traj,) = map(json.loads, (tmp_path / "runs/eval/u/trajectories.jsonl").open())
    assert traj["metadata"]["unscorable_reason"].endswith("no such table: Nowhere") and traj["metrics"]["em"] == 0.0
    metrics = json.loads((tmp_path / "runs/eval/u/metrics.json").read_text())
    assert metrics["unscorable_reasons"] == {"the gold statement fails on SQLite: no such table: Nowhere": 1}


# ----------------------------------------------------------------------------- scoring inside the item timeout


def test_scoring_runs_in_a_thread_that_the_item_timeout_interrupts(tmp_path):
    import functools

    from agentrl.core.chat import Turn
    from agentrl.envs.base import tool_schemas
    from agentrl.envs.task import Task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    # a gold statement that never ends: scoring runs it on a fresh copy (60 s statement limit)
    endless = ("UPDATE Cities SET Area = (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
               "SELECT COUNT(*) FROM c)")
    slow, quick = modify_task(endless), modify_task("UPDATE Cities SET Area = '2' WHERE City = 'Arden'")
    slow["id"] = "slow"

    def plan(row):
        return [Turn(content="<answer>done</answer>", finish_reason="stop")]

    task = Task(name="sql", make_env=functools.partial(SQLEnv, limits=SQLLimits(time_limit=60)), system_prompt="",
                oracle_plan=plan, score=sql_score)
    tool_schemas(task.make_env())  # imports transformers once, outside the timing
    start = time.monotonic()
    run_batch(OraclePolicy(plan), task, [slow, quick], tmp_path,
              RunConfig(progress=False, item_timeout=1.0, concurrency=2))
    elapsed = time.monotonic() - start
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "trajectories.jsonl").open())}
    assert recs["slow"]["error"].startswith("timeout") and recs["mod"]["error"] is None
    assert elapsed < 5  # not the 60 s statement limit: the timeout fired while scoring ran, and stopped it
    assert running({"run_statement", "SQLEnv._run_gold"}) == []


def test_an_interrupt_stops_scoring_and_yields_zeros_not_a_verdict():
    import threading

    task = modify_task("UPDATE Cities SET Area = (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
                       "SELECT COUNT(*) FROM c)")
    env = SQLEnv(limits=SQLLimits(time_limit=60))
    env.reset(**task)
    threading.Timer(0.3, env._interrupt).start()
    scores = sql_score("done", task, env)
    assert scores["unscorable"] == 0.0 and scores["exec"] == 0.0 and env._score_notes() == {}
    assert env._gold_result is None  # an interrupt is no verdict on the gold statement
    env.reset(**task)
    assert not env._cancel.is_set()
    assert said(env.execute_sql, f"SELECT COUNT(*) FROM {quote('Cities')}") == "COUNT(*)\n5"


# ----------------------------------------------------------------------------- the dense overlap (sql_overlap)

GOLD_NORLAND = "SELECT City FROM Cities WHERE Country = 'Norland'"  # Arden, Calder


@pytest.mark.parametrize("queries,expected", [
    ([GOLD_NORLAND], 1.0),  # the gold result: full credit, as exec
    (["SELECT City FROM Cities WHERE Country = 'Sudria'"], 0.3),  # the right column, none of the gold rows
    (["SELECT City FROM Cities"], 0.3 + 0.7 * 2 / 5),  # the right column, every row: 2 of the 5 are gold
    (["SELECT City FROM Cities WHERE Population > 100000"], 0.3 + 0.7 * 2 / 3),  # Arden, Calder + Montréal
    (["SELECT * FROM Cities WHERE Country = 'Norland'"], 0.0),  # extra columns earn nothing
    (["SELECT City, Country FROM Cities WHERE Country = 'Norland'"], 0.0),
    (["SELECT Country FROM Cities"], 0.0),  # no gold column
    (["SELECT 'Arden' AS City UNION SELECT 'Calder'"], 0.0),  # constant: does not read the table
    (["SELECT * FROM Cities", "SELECT City FROM Cities"], 0.3 + 0.7 * 2 / 5),  # the best SELECT counts
])
def test_the_dense_overlap_credits_gold_columns_and_rows_and_nothing_for_extra_columns(queries, expected):
    scores = episode(select_task(["Arden", "Calder"], GOLD_NORLAND), *queries, answer="Arden")
    assert scores["overlap"] == pytest.approx(expected), queries
    assert scores["overlap"] <= 1.0 and (scores["overlap"] == 1.0) == (scores["exec"] == 1.0)


def test_the_dense_overlap_of_a_write_task_is_its_progress_toward_the_gold_table():
    gold = "UPDATE Cities SET Population = 1 WHERE Country = 'Norland'"
    task = modify_task(gold)
    assert episode(task, gold)["overlap"] == 1.0
    half = episode(task, "UPDATE Cities SET Population = 1 WHERE City = 'Arden'")["overlap"]
    assert 0.0 < half < 1.0
    assert episode(task, "DELETE FROM Cities")["overlap"] == 0.0  # away from the gold table


def test_the_sql_overlap_reward_is_a_preset_reward_that_a_grpo_run_accepts():
    from agentrl.train.configs import GRPOSettings

    settings = GRPOSettings.of(env="sql", sql={"rewards": {"sql_overlap": 1.0, "format": 0.1}})
    assert settings.reward_names() == ["sql_overlap", "format"]
