"""DB Bench scored by AgentBench's rules, the sandbox against expansion bombs and bad bytes, ungameable rewards."""

import json
import subprocess
import sys

import pytest

from agentrl.envs.sql.agentbench import clean_answer, compare_results, expected_hash, table_hash
from agentrl.envs.sql.dbbench import load_dbbench
from agentrl.envs.sql.env import SQLEnv, sql_score
from agentrl.envs.sql.lex import mysql_to_sqlite
from agentrl.envs.sql.oracle import oracle_plan
from agentrl.envs.sql.sandbox import quote
from agentrl.rollout.rewards import reward_registry
from conftest import DBBENCH, ROOT, said

sql_execution = reward_registry()["sql_execution"]


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


# AgentBench's verdicts on MySQL-result-shaped and expression answers, derived by hand from its
# result_processor.py (DBResultProcessor): the rule that decides each row is in its comment
AGENTBENCH_VERDICTS = [
    # _clean_mysql_result: eval fails (a bare name), the text without brackets is one tuple ending ",)": ["Paris"]
    ("[(Paris,)]", ["Paris"], True),
    # _clean_mysql_result: a list of tuples keeps the one-value tuples only: ["x"]
    ("[('x',), ('y', 'z')]", ["x"], True),
    # ... [] (the two-value tuple dropped) against []: several-values branch, no values, equal lengths
    ("[(1, 2)]", [], True),
    # ... [] against ["Paris"]: not all floats, set() != {"Paris"}
    ("[('Paris', 'France')]", ["Paris"], False),
    # eval gives 5, not a list: no MySQL reading, _clean_answer returns None, len(None) raises: False, always
    ("[5][0]", ["5"], False),
    ("[5][0]", [5], False),
    # eval gives [1, 2]: _clean_answer's list branch; numbers matched one-to-one
    ("[1] + [2]", ["1", "2"], True),
    # eval gives a list of two ('x',) tuples: ["x", "x"] against ["x"]: several values, not floats: set equality
    ("[('x',), ('x',)][:]", ["x"], True),
    # it does not end with "]": one value, the whole text
    ("[('x',)] * 2", ["x"], False),
    # one-value tuple None -> "None" -> _normalize_special_values "0"; both "0"
    ("[(None,)]", ["0"], True),
    # the tuple's value is normalised: thousands comma removed, trailing % dropped
    ("[('1,234',)]", ["1234"], True),
    ("[('45%',)]", ["45"], True),
    # eval fails and there are two tuples: no MySQL reading; eval fails again: split on commas outside quotes into
    # "(Paris", ")", "(Rome", ")"
    ("[(Paris,), (Rome,)]", ["Paris", "Rome"], False),
    # not all tuples: no MySQL reading (and the stripped text does not end in ",)"); the list branch unpacks ('a',)
    ("[('a',), 'b']", ["a", "b"], True),
    # ('a') is no tuple: the list branch: ["a"]
    ("[('a')]", ["a"], True),
    # an empty result: [] against []: True; against ["0"]: several-values branch, all floats, lengths differ
    ("[]", [], True),
    ("[]", ["0"], False),
    # a leading space: no MySQL reading (it does not start with "["); stripped, then the list branch unpacks ('x',)
    (" [('x',)]", ["x"], True),
    # string comparison is case-sensitive
    ("['Paris']", ["paris"], False),
    # one-value tuples of numbers: floats matched one-to-one within 1e-2, any order
    ("[(1.004,), (2,)]", ["2", "1"], True),
    # not list-looking (no closing bracket): one value, commas kept because it starts with "["
    ("[1, 2", ["1", "2"], False),
]


@pytest.mark.parametrize("answer,label,verdict", AGENTBENCH_VERDICTS)
def test_mysql_shaped_answers_get_agentbenchs_verdict(answer, label, verdict):
    assert compare_results(answer, label) is verdict


def test_expressions_are_evaluated_as_eval_would_but_names_and_calls_never_run(tmp_path):
    from agentrl.envs.sql.agentbench import safe_eval

    assert safe_eval("[5][0]") == 5 and safe_eval("[1, 2][1:]") == [2] and safe_eval("  (1,) + (2,)") == (1, 2)
    assert safe_eval("[1 if 2 > 1 else 0, not 0, 3 // 2]") == [1, True, 1]
    marker = tmp_path / "ran"
    for text in (f"[__import__('pathlib').Path({str(marker)!r}).touch()]", "[print]", "[x for x in [1]]",
                 "[10 ** 10 ** 10]", "['x' * 10 ** 9]", "[1 << 10 ** 9]", "[(lambda: 1)()]"):
        with pytest.raises((ValueError, SyntaxError)):
            safe_eval(text)
    assert not marker.exists()


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
    said(env.execute_sql, json.loads(plan[0].tool_calls[0]["arguments"])["query"])
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


def _cte_bomb(levels: int, style: str = "plain", pad: int = 0) -> str:
    """A statement whose CTE c<i> reads c<i-1> twice (2**levels copies once SQLite inlines them), written in one of
    several styles, with ``pad`` unused CTEs (which defeated a ratio-of-references check)."""
    quoted = {"double": '"c{}"', "backtick": "`c{}`", "bracket": "[c{}]"}.get(style, "c{}")

    def name(i: int) -> str:
        return quoted.format(i)

    def body(i: int) -> str:
        prev = name(i - 1)
        if style == "alias":
            return f"SELECT (SELECT a.x FROM {prev} AS a) + (SELECT b.x FROM {prev} b) AS x"
        if style == "subquery":
            return f"SELECT x FROM (SELECT x FROM {prev} UNION ALL SELECT x FROM (SELECT * FROM {prev})) LIMIT 1"
        if style == "nested_with":
            return f"WITH d AS (SELECT x FROM {prev}) SELECT (SELECT x FROM d) + (SELECT x FROM d) AS x"
        return f"SELECT (SELECT x FROM {prev}) + (SELECT x FROM {prev}) AS x"

    head = {"columns": "(x)", "materialized": "", "not_materialized": ""}.get(style, "")
    as_ = {"materialized": "AS MATERIALIZED", "not_materialized": "AS NOT MATERIALIZED"}.get(style, "AS")
    parts = [f"{name(0)}{head} AS (SELECT 1 AS x)"]
    parts += [f"{name(i)}{head} {as_} ({body(i)})" for i in range(1, levels)]
    # padding: unused CTEs, some reading each other once (a chain that costs nothing)
    parts += [f"u{j} AS (SELECT 1 AS x)" if j % 2 == 0 else f"u{j} AS (SELECT x FROM u{j - 1})" for j in range(pad)]
    recursive = "RECURSIVE " if style == "recursive" else ""
    return f"WITH {recursive}{', '.join(parts)} SELECT x FROM {name(levels - 1)}"


CTE_STYLES = ["plain", "alias", "subquery", "nested_with", "double", "backtick", "bracket", "columns",
              "materialized", "not_materialized", "recursive"]


def test_cte_bombs_of_every_shape_are_refused_cleanly_with_bounded_memory(tasks, tmp_path):
    # in a subprocess, whose peak RSS is its own: the bound holds before SQLite prepares anything
    cases = [(levels, style, pad) for levels in (18, 20, 22, 24) for style in CTE_STYLES for pad in (0, 3 * levels)]
    script = tmp_path / "bombs.py"
    script.write_text(f"""
import json, resource, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from test_sql_agentbench import _cte_bomb
from conftest import said
from agentrl.envs.sql.dbbench import load_dbbench
from agentrl.envs.sql.env import SQLEnv
from agentrl.envs.sql.sandbox import quote
task = load_dbbench({str(DBBENCH)!r})[0]
env = SQLEnv()
env.reset(**task)
table = quote(task["metadata"]["table"]["table_name"])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = [said(env.execute_sql, _cte_bomb(*case)) for case in {cases!r}]
alive = said(env.execute_sql, f"SELECT COUNT(*) FROM {{table}}")
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps({{"out": out, "alive": alive, "grew_mb": grew}}))
""")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, out in zip(cases, result["out"], strict=True):
        assert out.startswith("Error: statement too complex"), (case, out[:200])
    assert not result["alive"].startswith("Error") and result["grew_mb"] < 512


def test_real_queries_stay_far_below_the_cte_bound(tasks):
    from agentrl.envs.sql.lex import MAX_CTE_EXPANSION, cte_expansion

    t = quote(tasks[0]["metadata"]["table"]["table_name"])
    assert max(cte_expansion(task["metadata"]["sql"] or "") for task in tasks) < MAX_CTE_EXPANSION / 100
    # a few CTEs reading each other, each read several times, and a recursive one: small
    sql = (f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5), a AS (SELECT * FROM {t}), "
           "b AS (SELECT * FROM a, a AS a2), c AS (SELECT * FROM b UNION ALL SELECT * FROM b) "
           "SELECT COUNT(*) FROM c, n, a")
    assert cte_expansion(sql) < 1000
    assert cte_expansion(_cte_bomb(10)) < MAX_CTE_EXPANSION < cte_expansion(_cte_bomb(14))  # 2**10 vs 2**14 copies
    # names in strings and comments are no references; a cycle counts as over the bound
    assert cte_expansion("WITH c0 AS (SELECT 1) SELECT 'c0 c0 c0', /* c0 c0 */ 1") < 30
    assert cte_expansion("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a) SELECT * FROM a") > MAX_CTE_EXPANSION


def test_a_few_ctes_referring_to_each_other_still_run(tasks):
    env = SQLEnv()
    env.reset(**tasks[0])
    t = quote(tasks[0]["metadata"]["table"]["table_name"])
    out = said(env.execute_sql, f"WITH a AS (SELECT * FROM {t}), b AS (SELECT * FROM a), c AS (SELECT * FROM b) "
                          "SELECT COUNT(*) FROM c, a WHERE 0")
    assert not out.startswith("Error")


def test_invalid_utf8_written_into_the_table_never_breaks_scoring_or_rewards(tasks):
    task = tasks[40]
    table = task["metadata"]["table"]
    t, c = quote(table["table_name"]), quote(table["table_info"]["columns"][0]["name"])
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    assert said(env.execute_sql, f"UPDATE {t} SET {c} = CAST(x'ff' AS TEXT)").startswith("OK")
    assert "\ufffd" in said(env.execute_sql, f"SELECT {c} FROM {t} LIMIT 1")
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
        said(env.execute_sql, f"SELECT * FROM {quote(task['metadata']['table']['table_name'])} LIMIT 1")
        assert sql_score("done", task, env)["exec"] == 0.0, task["id"]


def test_a_literal_select_never_earns_exec_credit(tasks):
    task = next(t for t in tasks if t["metadata"]["kind"] == "select")
    env = SQLEnv(jaccard=True)
    env.reset(**task)
    label = task["metadata"]["label"]
    said(env.execute_sql, "SELECT " + ", ".join("'" + str(v).replace("'", "''") + "'" for v in label))
    scores = sql_score("wrong", task, env)
    assert scores["exec"] == 0.0 and scores["result_match"] == 0.0


def test_a_sanity_query_after_the_right_one_keeps_the_credit(tasks):
    checked = 0
    for task in (t for t in tasks if t["metadata"]["kind"] == "select"):
        env = SQLEnv()
        env.reset(**task)
        plan = oracle_plan(task)
        said(env.execute_sql, json.loads(plan[0].tool_calls[0]["arguments"])["query"])
        if sql_score(None, task, env)["exec"] != 1.0:
            continue  # a gold query SQLite cannot run: the oracle only looks at the table
        said(env.execute_sql, "SELECT 1")
        assert sql_score(None, task, env)["exec"] == 1.0, task["id"]
        checked += 1
    assert checked >= 3


def test_scoring_mode_reaches_eval_and_grpo_configs():
    from agentrl.envs.sql import SQLSettings
    from agentrl.rollout.evaluate import EvalConfig, build_task
    from agentrl.train import grpo
    from agentrl.train.configs import GRPOSettings

    cfg = EvalConfig(env="sql", envs={"sql": SQLSettings(scoring="lenient")})
    assert build_task(cfg, {}).config["scoring"] == "lenient"
    assert build_task(EvalConfig(env="sql"), {}).config["scoring"] == "agentbench"
    settings = GRPOSettings.of(env="sql", sql={"scoring": "lenient"})
    assert grpo.build_task(settings, {}).config["scoring"] == "lenient"
    with pytest.raises(Exception, match="unknown SQL scoring"):
        SQLEnv(scoring="exact")
