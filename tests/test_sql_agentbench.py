"""DB Bench scored by AgentBench's rules, the sandbox against expansion bombs and bad bytes, ungameable rewards."""

import json
import resource
import time

import pytest

from agentrl.envs.agentbench import clean_answer, compare_results, expected_hash, table_hash
from agentrl.envs.sql import SQLEnv, load_dbbench, mysql_to_sqlite, oracle_plan, quote, sql_score
from agentrl.rewards import sql_execution
from conftest import DBBENCH


@pytest.fixture(scope="module")
def tasks():
    return load_dbbench(DBBENCH)


@pytest.mark.parametrize("answer,label,same", [
    ("Paris", ["Paris"], True),
    ("PARIS", ["Paris"], False),  # case-sensitive, unlike the lenient rule
    (" 'Paris' ", ["Paris"], True),  # quotes and whitespace stripped
    ("12.004", ["12"], True),  # floats within 1e-2
    ("12.02", ["12"], False),
    ("45%", ["45"], True),  # a trailing % dropped
    ("1,234", ["1234"], True),  # thousands commas
    ("None", [None], True), ("null", [""], True), ("nan", ["0"], True),  # special values are "0"
    ('["b", "a"]', ["a", "b"], True),  # several text values: set equality
    ('["a", "a", "b"]', ["a", "b"], True),
    ("[1.001, 2]", ["2", "1"], True),  # several numbers: one-to-one within 1e-2, any order
    ("[1, 2, 2]", ["1", "2"], False),  # ... with equal lengths
    ("a, b", ["a", "b"], False),  # not a list: one value "a b"
    ("[('x',), ('y',)]", ["x", "y"], True),  # MySQL result tuples
])
def test_select_answers_follow_agentbench_compare_results(answer, label, same):
    assert compare_results(answer, label) is same


def test_list_answers_are_parsed_without_running_model_text(tmp_path):
    marker = tmp_path / "ran"
    evil = f"[__import__('pathlib').Path({str(marker)!r}).touch()]"
    assert clean_answer(evil)  # AgentBench's fallback split on commas
    assert not marker.exists()


def test_the_table_hash_is_agentbenchs_md5_of_sorted_row_hashes():
    import hashlib

    rows = [("a", None, 1), ("b", "c", 2.0)]
    row_hashes = sorted(hashlib.md5(x.encode()).hexdigest()[:5] for x in ("a,1", "b,c,2"))
    assert table_hash(rows) == hashlib.md5(",".join(row_hashes).encode()).hexdigest()
    assert table_hash([]) is None
    assert expected_hash("[('09aa8fbf72f39362970f95a1276b957c',)]") == "09aa8fbf72f39362970f95a1276b957c"


def _oracle(task, scoring):
    env = SQLEnv(scoring=scoring)
    env.reset(**task)
    plan = oracle_plan(task)
    env.execute_sql(json.loads(plan[0].tool_calls[0]["arguments"])["query"])
    return sql_score(plan[1].content.split("<answer>")[1].split("</answer>")[0], task, env)


def test_the_oracle_scores_one_on_every_dev_task_under_both_scorings(tasks):
    for scoring in ("agentbench", "lenient"):
        scores = [_oracle(t, scoring) for t in tasks]
        assert [t["id"] for t, m in zip(tasks, scores, strict=True) if m["em"] != 1.0] == [], scoring
    # every modify task's gold reproduces its answer_md5 through the table hash
    assert sum(1 for t in tasks if t["metadata"]["kind"] == "modify") == 40


def test_upper_casing_a_column_passes_lenient_but_not_agentbench(tasks):
    task = next(t for t in tasks if t["metadata"]["kind"] == "select" and len(t["metadata"]["label"]) == 1
                and str(t["metadata"]["label"][0]) != str(t["metadata"]["label"][0]).upper())
    label = task["metadata"]["label"]
    for scoring, expected in (("agentbench", 0.0), ("lenient", 1.0)):
        env = SQLEnv(scoring=scoring)
        env.reset(**task)
        assert sql_score(str(label[0]).upper(), task, env)["em"] == expected


def test_a_modify_task_is_scored_on_the_text_mysql_keeps(tasks):
    task = tasks[53]  # SET `E Score` = '7.400': NUMERIC affinity would store 7.4 and change the hash
    assert "7.400" in task["metadata"]["sql"] and _oracle(task, "agentbench")["agentbench"] == 1.0


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cte_bomb(levels: int) -> str:
    parts = ["c0 AS (SELECT 1 AS x)"] + [f"c{i} AS (SELECT (SELECT x FROM c{i - 1})+(SELECT x FROM c{i - 1}) AS x)"
                                         for i in range(1, levels)]
    return f"WITH {', '.join(parts)} SELECT x FROM c{levels - 1}"


@pytest.mark.parametrize("levels", [18, 20, 22, 24])
def test_nested_cte_bombs_end_fast_with_bounded_memory(tasks, levels):
    env = SQLEnv()
    env.reset(**tasks[0])
    before, start = _rss_mb(), time.monotonic()
    out = env.execute_sql(_cte_bomb(levels))
    assert out.startswith("Error:") and "too complex" in out
    assert time.monotonic() - start < 1.0 and _rss_mb() - before < 512
    assert env.execute_sql(f"SELECT COUNT(*) FROM {quote(tasks[0]['metadata']['table']['table_name'])}") != ""


def test_a_few_ctes_referring_to_each_other_still_run(tasks):
    env = SQLEnv()
    env.reset(**tasks[0])
    t = quote(tasks[0]["metadata"]["table"]["table_name"])
    out = env.execute_sql(f"WITH a AS (SELECT * FROM {t}), b AS (SELECT * FROM a), c AS (SELECT * FROM b) "
                          "SELECT COUNT(*) FROM c, a WHERE 0")
    assert not out.startswith("Error")


def test_invalid_utf8_written_into_the_table_never_breaks_scoring_or_rewards(tasks):
    task = tasks[40]
    table = task["metadata"]["table"]
    t, c = quote(table["table_name"]), quote(table["table_info"]["columns"][0]["name"])
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    assert env.execute_sql(f"UPDATE {t} SET {c} = CAST(x'ff' AS TEXT)").startswith("OK")
    assert "\ufffd" in env.execute_sql(f"SELECT {c} FROM {t} LIMIT 1")
    scores = sql_score("done", task, env)
    assert scores["em"] == 0.0 and 0.0 <= scores["exec"] < 1.0
    assert sql_execution(None, [[{"role": "assistant", "content": "<answer>done</answer>"}]],
                         environments=[env])[0] < 1.0


def test_a_gold_statement_that_fails_makes_the_task_unscorable_not_a_crash(tasks):
    task = json.loads(json.dumps(tasks[40]))
    task["metadata"]["sql"] = "UPDATE nowhere SET x = 1"
    task["metadata"]["answer_md5"] = None
    env = SQLEnv(scoring="lenient")
    env.reset(**task)
    scores = sql_score("done", task, env)
    assert scores["unscorable"] == 1.0 and scores["em"] == 0.0


def test_mysql_identifiers_starting_with_a_digit_are_quoted_for_sqlite():
    sql = "INSERT INTO 1952_British_Grand_Prix_0 (a) VALUES ('1952_British_Grand_Prix_0')"
    out = mysql_to_sqlite(sql, "1952_British_Grand_Prix_0")
    assert out.startswith('INSERT INTO "1952_British_Grand_Prix_0" (a)') and "VALUES ('1952_British" in out


# ----------------------------------------------------------------------------- rewards that can't be gamed


def test_doing_nothing_on_a_modify_task_earns_nothing_even_with_jaccard(tasks):
    for task in (t for t in tasks if t["metadata"]["kind"] == "modify"):
        env = SQLEnv(jaccard=True)
        env.reset(**task)
        env.execute_sql(f"SELECT * FROM {quote(task['metadata']['table']['table_name'])} LIMIT 1")
        assert sql_score("done", task, env)["exec"] == 0.0, task["id"]


def test_a_literal_select_never_earns_exec_credit(tasks):
    task = next(t for t in tasks if t["metadata"]["kind"] == "select")
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    label = task["metadata"]["label"]
    env.execute_sql("SELECT " + ", ".join("'" + str(v).replace("'", "''") + "'" for v in label))
    scores = sql_score("wrong", task, env)
    assert scores["exec"] == 0.0 and scores["result_match"] == 0.0


def test_a_sanity_query_after_the_right_one_keeps_the_credit(tasks):
    checked = 0
    for task in (t for t in tasks if t["metadata"]["kind"] == "select"):
        env = SQLEnv()
        env.reset(**task)
        plan = oracle_plan(task)
        env.execute_sql(json.loads(plan[0].tool_calls[0]["arguments"])["query"])
        if sql_score(None, task, env)["exec"] != 1.0:
            continue  # a gold query SQLite cannot run: the oracle only looks at the table
        env.execute_sql("SELECT 1")
        assert sql_score(None, task, env)["exec"] == 1.0, task["id"]
        checked += 1
    assert checked >= 3


def test_scoring_mode_reaches_eval_and_grpo_configs():
    from agentrl.evaluate import build_task, eval_config
    from agentrl.train import grpo

    cfg = eval_config({}, env="sql", sql_scoring="lenient")
    assert build_task(cfg, {}).config["scoring"] == "lenient"
    assert build_task(eval_config({}, env="sql"), {}).config["scoring"] == "agentbench"
    settings = grpo.grpo_config({"grpo": {"env": "sql", "sql_scoring": "lenient"}})
    assert grpo.build_task(settings, {}).config["scoring"] == "lenient"
    with pytest.raises(Exception, match="unknown SQL scoring"):
        SQLEnv(scoring="exact")
