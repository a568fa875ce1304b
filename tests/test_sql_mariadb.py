"""The MariaDB backend against a real server: DB Bench scored as AgentBench scores it, isolation between episodes,
no file access, statement time limits, clean-up, cancellation, hostile statements."""

import functools
import json
import threading
import time

import pytest

from agentrl.envs.sql import mariadb, mariadb_server
from agentrl.envs.sql.agentbench import table_hash
from agentrl.envs.sql.dbbench import load_dbbench
from agentrl.envs.sql.env import SQLEnv, sql_score
from agentrl.envs.sql.sandbox import SQLLimits
from conftest import DBBENCH, running, said

pytestmark = pytest.mark.skipif(not mariadb_server.available(),
                                reason="mariadbd not found: apt-get install mariadb-server (.ci/run installs it)")

# SELECT tasks whose gold query does not give the label on MariaDB: the eight that fail on SQLite too, plus db_7
# (a 'single-quoted' table name, which SQLite takes for an identifier and MySQL for a string) ...
GOLD_DOES_NOT_RUN = {"db_0", "db_2", "db_6", "db_7", "db_8", "db_11", "db_13", "db_18", "db_19"}
# ... and those whose gold runs but returns something else: db_16 now too (MIN over a TEXT column compares text in
# MySQL; the SQLite backend's NUMERIC affinity compares numbers), db_10 no longer (MySQL compares its TEXT column
# with a number numerically)
GOLD_DISAGREES_WITH_LABEL = {"db_1", "db_12", "db_15", "db_16", "db_17"}
# ... and db_9, whose label is ['none']: an empty result depends on no data, so it earns no execution match
EMPTY_RESULT = {"db_9"}
# MySQL (AgentBench's MySQL 8 too) refuses to create this task's table: one column has an empty name
TABLE_REFUSED = {"db_5"}


@pytest.fixture(scope="module")
def server():
    return mariadb_server.shared_server()


@pytest.fixture(scope="module")
def tasks():
    return load_dbbench(DBBENCH)


_OPEN: list = []


@pytest.fixture(autouse=True)
def _close_envs():
    yield
    while _OPEN:  # a failed test must not leave its databases behind for the next one's clean-up checks
        _OPEN.pop()._close()


def _env(server, task, **kw):
    env = mariadb.MariaDBEnv(server=server, **kw)
    _OPEN.append(env)
    env.reset(**task)
    return env


def _table(task) -> str:
    return mariadb_server.backtick(task["metadata"]["table"]["table_name"])


def _ep_users(server) -> list:
    return server.admin(["SELECT user FROM mysql.user WHERE user LIKE 'ep\\_%'"])


@pytest.mark.parametrize("scoring", ["agentbench", "lenient"])
def test_the_oracle_scores_one_on_every_dev_task_whose_table_mysql_accepts(server, tasks, tmp_path, scoring):
    from agentrl.envs.sql import sql_task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    task = sql_task(backend="mariadb", scoring=scoring)
    assert "MySQL" in task.system_prompt and "backticks" in task.system_prompt
    run_batch(OraclePolicy(task.oracle_plan), task, tasks, tmp_path, RunConfig(progress=False, concurrency=4))
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "trajectories.jsonl").open())}
    assert {i for i, r in recs.items() if r["error"]} == TABLE_REFUSED
    assert "cannot create the task's table" in recs["db_5"]["error"]
    ok = {i: r["metrics"] for i, r in recs.items() if not r["error"]}
    assert {i for i, m in ok.items() if m["em"] != 1.0} == set()
    # every modify task's gold reproduces its answer_md5 by AgentBench's own hash query on the server
    assert sum(1 for t in tasks if t["metadata"]["kind"] == "modify") == 40
    assert all(ok[t["id"]]["agentbench"] == 1.0 for t in tasks if t["metadata"]["kind"] == "modify")
    gaps = GOLD_DOES_NOT_RUN | GOLD_DISAGREES_WITH_LABEL | EMPTY_RESULT
    assert {i: m["exec"] for i, m in ok.items()} == {i: 0.1 if i in gaps else 1.0 for i in ok}
    assert server.databases() == [] and _ep_users(server) == []  # every episode's database and user dropped


def test_the_known_gold_gaps_on_mariadb_are_exactly_these(server, tasks):
    errors, mismatches = set(), set()
    for t in tasks:
        if t["id"] in TABLE_REFUSED:
            with pytest.raises(Exception, match="Incorrect column name"):
                _env(server, t)
            continue
        env = _env(server, t)
        meta = t["metadata"]
        out = said(env.execute_sql, meta["sql"])
        scores = sql_score(json.dumps(meta["label"]) if meta["kind"] == "select" else "done", t, env)
        if meta["kind"] == "modify":
            assert not out.startswith("Error") and scores["state_match"] == 1.0, (t["id"], out)
        elif out.startswith("Error"):
            errors.add(t["id"])
        elif not scores["result_match"]:
            mismatches.add(t["id"])
        env._close()
    assert errors == GOLD_DOES_NOT_RUN
    assert mismatches == GOLD_DISAGREES_WITH_LABEL | EMPTY_RESULT


def test_the_table_is_created_as_agentbench_creates_it(server, tasks):
    env = _env(server, tasks[53])
    types = said(env.execute_sql,
                 "SELECT DISTINCT data_type FROM information_schema.columns WHERE table_schema = DATABASE()")
    assert types == "data_type\ntext"  # every column TEXT, whatever the task declares
    said(env.execute_sql, tasks[53]["metadata"]["sql"])
    assert sql_score("done", tasks[53], env)["agentbench"] == 1.0
    env._close()


def test_an_episode_sees_only_its_own_database(server, tasks):
    a, b = _env(server, tasks[40]), _env(server, tasks[41])
    assert a._database != b._database
    assert said(a.execute_sql, "SHOW DATABASES").split("\n")[1:] == ["information_schema", a._database] or \
        sorted(said(a.execute_sql, "SHOW DATABASES").split("\n")[1:]) == sorted(["information_schema", a._database])
    other = f"`{b._database}`.{_table(tasks[41])}"
    for sql in (f"SELECT * FROM {other}", f"DELETE FROM {other}", f"USE `{b._database}`", "SELECT * FROM mysql.user",
                "SELECT * FROM mysql.global_priv", "SHOW GRANTS FOR root@localhost"):
        assert said(a.execute_sql, sql).startswith("Error"), sql
    schemas = said(a.execute_sql, "SELECT DISTINCT table_schema FROM information_schema.tables")
    assert b._database not in schemas and "mysql" not in schemas.split("\n")
    privileges = said(a.execute_sql, "SELECT user FROM information_schema.user_privileges")
    assert "ep_" not in privileges.replace(a._database, "")
    assert not said(b.execute_sql, f"SELECT COUNT(*) FROM {_table(tasks[41])}").startswith("Error")
    a._close(), b._close()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM {t} INTO OUTFILE '{d}/out.txt'",
    "SELECT * FROM {t} INTO DUMPFILE '{d}/dump.txt'",
    "SELECT 'x' INTO OUTFILE '/tmp/agentrl-mariadb-outfile.txt'",
    "LOAD DATA INFILE '/etc/passwd' INTO TABLE {t}",
    "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE {t}",
    "LOAD XML INFILE '/etc/passwd' INTO TABLE {t}",
])
def test_no_file_is_read_or_written(server, tasks, sql):
    env = _env(server, tasks[40])
    out = said(env.execute_sql, sql.format(t=_table(tasks[40]), d=server.dir / "files"))
    assert out.startswith("Error"), out
    assert list((server.dir / "files").iterdir()) == []
    assert "root:" not in said(env.execute_sql, "SELECT LOAD_FILE('/etc/passwd')")
    env._close()


@pytest.mark.parametrize("sql", [
    "SELECT SLEEP(100)",
    "SELECT BENCHMARK(10000000000, MD5('x'))",
    "SELECT COUNT(*) FROM information_schema.columns a, information_schema.columns b, information_schema.columns c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) SELECT COUNT(*) FROM c",
    "SELECT GET_LOCK('agentrl', 100), SLEEP(100)",
])
def test_a_slow_statement_ends_within_the_time_limit(server, tasks, sql):
    env = _env(server, tasks[40], limits=SQLLimits(time_limit=0.5))
    start = time.monotonic()
    out = said(env.execute_sql, sql)
    assert time.monotonic() - start < 0.5 + mariadb.WATCHDOG_GRACE + 0.5
    if out.startswith("Error"):  # recursion capped at MySQL 8's depth is an error too, before the limit
        assert "time limit" in out or "recursi" in out.lower() or "limit" in out.lower(), out
    assert said(env.execute_sql, "SELECT 1") == "1\n1"
    env._close()


@pytest.mark.parametrize("sql", [
    "SET SESSION max_statement_time = 0",
    "SET max_statement_time = 0",
    "SET @@session.max_statement_time = 0",
    "  /* hello */ set statement max_statement_time = 0 for select sleep(3)",
    "/*!SET max_statement_time = 0 */",
    "/*M!100000 SET max_statement_time = 0 */",
    "/*!99999 SELECT */ SET max_statement_time = 0",
    "-- a comment\nSET max_statement_time = 0",
    "PREPARE s FROM 'SET max_statement_time = 0'",
    "EXECUTE IMMEDIATE 'SET max_statement_time = 0'",
    "SET GLOBAL max_statement_time = 0",
    "SET sql_select_limit = DEFAULT",
])
def test_the_time_limit_cannot_be_lifted(server, tasks, sql):
    env = _env(server, tasks[40], limits=SQLLimits(time_limit=0.5))
    assert said(env.execute_sql, sql).startswith("Error")
    start = time.monotonic()
    assert "time limit" in said(env.execute_sql, "SELECT SLEEP(3)")
    assert time.monotonic() - start < 1.5
    env._close()


HOSTILE = [
    "DROP TABLE {t}", "TRUNCATE TABLE {t}", "ALTER TABLE {t} ADD COLUMN evil TEXT", "CREATE TABLE evil (x INT)",
    "CREATE TEMPORARY TABLE evil (x INT)", "CREATE VIEW evil AS SELECT 1", "RENAME TABLE {t} TO gone",
    "CREATE DATABASE evil", "DROP DATABASE `{db}`", "CREATE USER evil IDENTIFIED BY 'x'",
    "GRANT ALL ON *.* TO CURRENT_USER()", "ALTER USER CURRENT_USER() WITH MAX_STATEMENT_TIME 0",
    "SHUTDOWN", "KILL 1", "DO SLEEP(100)", "FLUSH PRIVILEGES", "SET GLOBAL max_connections = 1",
    "LOCK TABLES {t} WRITE",
    "INSTALL SONAME 'ha_connect'", "CREATE FUNCTION f RETURNS STRING SONAME 'x.so'",
    "CREATE PROCEDURE p() SELECT 1", "CALL mysql.p()", "HANDLER {t} OPEN", "XA START 'x'", "BEGIN",
    "START TRANSACTION", "SELECT 1; DROP TABLE {t}", "USE mysql", "ANALYZE TABLE {t}", "OPTIMIZE TABLE {t}",
    "REPAIR TABLE {t}", "CHECKSUM TABLE {t}", "BINLOG 'AAAA'", "CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO SELECT 1",
    "SELECT * FROM {t} PROCEDURE ANALYSE()", "SELECT REPEAT('x', 1000000000)",
    "UPDATE {t} SET {c} = REPEAT('x', 3000000)",
    "INSERT INTO {t} SELECT a.* FROM {t} a, {t} b, {t} c, {t} d",
    "INSERT INTO {t} ({c}) SELECT 'x' FROM information_schema.columns a, information_schema.columns b",
    "SELECT * FROM {t} a, {t} b, {t} c, {t} d",
    "SELECT GROUP_CONCAT(REPEAT('x', 100000)) FROM {t} a, {t} b",
    "WITH RECURSIVE r AS (SELECT 1 AS x UNION ALL SELECT x FROM r) SELECT * FROM r",
    "SELECT \x00 1", "", "   ", ";", "\\G", "SELECT '\xff\ud800'",
]


def test_hostile_statements_leave_the_table_and_the_server_serving(server, tasks):
    task = tasks[40]
    t, c = _table(task), mariadb_server.backtick(task["metadata"]["table"]["table_info"]["columns"][0]["name"])
    env = _env(server, task, limits=SQLLimits(time_limit=0.5))
    before = env._agentbench_hash()
    for sql in HOSTILE:
        out = said(env.execute_sql, sql.format(t=t, c=c, db=env._database))
        assert isinstance(out, str), sql
        # nothing changed the table, and the episode and the server keep serving
        assert env._agentbench_hash() == before, (sql, out)
        assert said(env.execute_sql, f"SELECT COUNT(*) FROM {t}").split("\n")[1] == \
            str(len(task["metadata"]["table"]["table_info"]["rows"])), sql
    assert server.proc.poll() is None
    assert server.admin(["SELECT @@max_connections, @@global.max_statement_time"]) == [(1000, 0.0)]
    env._close()
    assert server.databases() == [] and _ep_users(server) == []


def test_errors_come_back_as_text_and_the_episode_recovers_a_lost_connection(server, tasks):
    env = _env(server, tasks[0])
    assert said(env.execute_sql, "SELECT 1 FROM").startswith("Error: 1064")
    assert "not allowed" in said(env.execute_sql, "SELEC 1")
    assert said(env.execute_sql, "SELECT nope FROM nowhere").startswith("Error: 1146")
    server.admin([f"KILL CONNECTION {env._conn.thread_id()}"])  # the server drops the connection
    assert said(env.execute_sql, "SELECT 1").startswith("Error")
    assert said(env.execute_sql, "SELECT 1") == "1\n1"
    env._close()


def test_a_literal_select_never_earns_exec_credit_but_a_read_of_the_table_does(server, tasks):
    task = next(t for t in tasks if t["metadata"]["kind"] == "select" and t["id"] not in
                GOLD_DOES_NOT_RUN | GOLD_DISAGREES_WITH_LABEL | TABLE_REFUSED)
    env = _env(server, task, jaccard=True)
    label = task["metadata"]["label"]
    values = ", ".join("'" + str(v).replace("'", "''") + "'" for v in label)
    said(env.execute_sql, f"SELECT {values}")
    said(env.execute_sql, f"SELECT {values} AS `{env._database}.{task['metadata']['table']['table_name']}`")
    said(env.execute_sql, f"SELECT '`{env._database}`.{_table(task)}', {values}")
    assert sql_score("wrong", task, env)["exec"] == 0.0
    said(env.execute_sql, task["metadata"]["sql"])
    said(env.execute_sql, "SELECT 1")  # a sanity query afterwards keeps the credit
    assert sql_score("wrong", task, env)["exec"] == 1.0
    env._close()


def test_long_results_are_capped_like_on_sqlite(server, tasks):
    env = _env(server, tasks[20], limits=SQLLimits(max_rows=3, max_scored_rows=50))
    t = _table(tasks[20])
    out = said(env.execute_sql, f"SELECT * FROM {t} a, {t} b")
    assert len(out.splitlines()) == 5 and "more rows" in out
    assert env._selects[-1].complete is False and len(env._selects[-1].values) == 50 * 8  # 50 rows, 2 x 4 cols
    assert said(env.execute_sql, "SELECT 1") == "1\n1"  # the rest of the result was not left in the connection
    env._close()


def test_an_item_timeout_stops_the_statement_on_the_server(server, tasks, tmp_path):
    from agentrl.core.chat import Turn
    from agentrl.envs.base import tool_schemas
    from agentrl.envs.task import Task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch

    call = {"id": "c0", "name": "execute_sql", "arguments": json.dumps({"query": "SELECT SLEEP(60)"})}

    def plan(row):
        return [Turn(tool_calls=[call]), Turn(content="<answer>x</answer>")]

    task = Task(name="sql", make_env=functools.partial(mariadb.MariaDBEnv, limits=SQLLimits(time_limit=60)),
                system_prompt="", oracle_plan=plan, score=sql_score)
    tool_schemas(task.make_env())  # imports transformers once, outside the timing
    start = time.monotonic()
    run_batch(OraclePolicy(plan), task, [tasks[40]], tmp_path, RunConfig(progress=False, item_timeout=0.5))
    (rec,) = map(json.loads, (tmp_path / "trajectories.jsonl").open())
    assert rec["error"].startswith("timeout") and time.monotonic() - start < 5
    assert running({"MariaDBEnv._fetch", "MariaDBEnv._run"}) == []
    sleeping = server.admin(["SELECT id FROM information_schema.processlist WHERE info LIKE 'SELECT SLEEP%'"])
    assert sleeping == [] and server.databases() == [] and _ep_users(server) == []


def test_concurrent_episodes_from_threads(server, tasks):
    modify = [t for t in tasks if t["metadata"]["kind"] == "modify"][:8]
    results: dict = {}

    def work(task):
        env = _env(server, task)
        said(env.execute_sql, task["metadata"]["sql"])
        results[task["id"]] = sql_score("done", task, env)["agentbench"]
        env._close()

    threads = [threading.Thread(target=work, args=(t,)) for t in modify]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert results == {t["id"]: 1.0 for t in modify}
    assert server.databases() == []


def test_eval_cli_takes_the_backend_and_grpo_settings_carry_it():
    from agentrl.app.commands import layers
    from agentrl.app.presets import load
    from agentrl.cli import build_parser
    from agentrl.rollout.evaluate import build_task
    from agentrl.train import grpo
    from agentrl.train.configs import GRPOSettings

    def evaluated(*flags):
        args = build_parser().parse_args(["eval", "--env", "sql", *flags])
        preset = load(None, flags=layers(args, "sql"))
        return build_task(preset.eval(), preset.data)

    assert evaluated("--env-arg", "backend=mariadb").config["backend"] == "mariadb"
    assert evaluated().config["backend"] == "sqlite"
    settings = GRPOSettings.of(env="sql", sql={"backend": "mariadb"})
    assert grpo.build_task(settings, {}).config["backend"] == "mariadb"


def test_a_missing_server_is_a_clear_error(monkeypatch):
    from agentrl.core.io import DataError
    from agentrl.envs.sql import mariadb_server, sql_task

    monkeypatch.setattr(mariadb_server.shutil, "which", lambda *a, **k: None)
    with pytest.raises(DataError, match="apt-get install mariadb-server"):
        sql_task(backend="mariadb")


# ----------------------------------------------------------------------------- issue 13 review: scoring on the server

def _episode(server, task, *statements, answer="done", **kw) -> dict:
    env = _env(server, task, **kw)
    for s in statements:
        assert not said(env.execute_sql, s).startswith("Error"), s
    scores = sql_score(answer, task, env)
    env._close()
    return scores


def test_transaction_control_is_refused_so_a_rolled_back_write_never_counts(server, tasks):
    task = tasks[40]
    env = _env(server, task)
    for statement in ("BEGIN", "START TRANSACTION", "SAVEPOINT a", "ROLLBACK", "COMMIT", "RELEASE SAVEPOINT a"):
        assert "not allowed" in said(env.execute_sql, statement), statement
    assert said(env.execute_sql, task["metadata"]["sql"]).startswith("OK (1 row")
    assert said(env.execute_sql, "ROLLBACK").startswith("Error")
    scores = sql_score("done", task, env)
    assert scores["agentbench"] == scores["state_match"] == 1.0
    env._close()


@pytest.mark.parametrize("label,query,credit", [
    (["5"], "SELECT COUNT(*) FROM Cities", 1.0),
    (["Norland"], "SELECT Country FROM Cities WHERE City = 'Arden'", 1.0),
    (["1700000"], "SELECT MAX(Population + 0) FROM Cities", 1.0),  # MAX(Population): the TEXT maximum, '95000'
    (["Norland"], "SELECT 'Norland' FROM Cities WHERE City IS NOT NULL LIMIT 1", 0.1),
    (["Norland"], "SELECT 'Norland' FROM Cities ORDER BY RAND() LIMIT 1", 0.1),
])
def test_exec_credit_on_mariadb_needs_a_result_that_depends_on_the_table(server, label, query, credit):
    from test_sql_credit import select_task

    for jaccard in (False, True):
        scores = _episode(server, select_task(label), query, answer=label[0], jaccard=jaccard)
        assert scores["exec"] == credit and scores["result_match"] == float(credit == 1.0), (query, jaccard)
    assert server.databases() == [] and _ep_users(server) == []  # the perturbed copies went with the episode


def test_on_mariadb_an_answer_written_into_the_table_earns_no_exec_credit(server):
    from test_sql_credit import select_task

    scores = _episode(server, select_task(["Norland"]), "INSERT INTO Cities (City, Country) VALUES ('Zed', 'Norland')",
                      "SELECT Country FROM Cities WHERE City = 'Zed'")
    assert scores["result_match"] == 0.0 and scores["exec"] == 0.1


def test_on_mariadb_partial_credit_only_toward_the_gold_table(server):
    from test_sql_credit import modify_task

    task = modify_task("DELETE FROM Cities WHERE Country = 'Sudria'", kind="DELETE")
    assert _episode(server, task, "DELETE FROM Cities WHERE City = 'Brisa'")["exec"] == 0.1
    assert _episode(server, task, "DELETE FROM Cities")["exec"] == 0.0
    right = _episode(server, task, "DELETE FROM Cities WHERE Country = 'Sudria'")
    assert right["exec"] == right["agentbench"] == 1.0  # no answer_md5: the gold statement's hash, on the server


def test_the_hashes_sqlite_emulates_are_the_servers(server):
    from test_sql_credit import modify_task, select_task

    for gold in ("UPDATE Cities SET Country = 'Westerra' WHERE City = 'Brisa'",
                 "INSERT INTO Cities VALUES ('Formby\\nUrban\\t\\\\\\'s', 'Norland', '4,567', '1.0')",
                 "UPDATE Cities SET Population = '1800000' WHERE City = 'montreal'",
                 "UPDATE Cities SET Country = 'Big' WHERE Population > 100000",
                 "UPDATE Cities SET Area = 5.50, Population = 007 WHERE City = 'Arden'"):
        task = modify_task(gold)
        sqlite_env = SQLEnv()
        sqlite_env.reset(**task)
        said(sqlite_env.execute_sql, gold)
        maria = _env(server, task)
        said(maria.execute_sql, gold)
        assert sqlite_env._agentbench_hash() == maria._agentbench_hash(), gold
        maria._close()
    # 200 rows: the server's group_concat is cut at 1024 characters, and so is ours
    big = {"table_name": "Big", "table_info": {"columns": [{"name": "n", "type": "TEXT"}],
                                               "rows": [[f"row {i}"] for i in range(200)]}}
    task = select_task(["x"])
    task["metadata"]["table"] = big
    env = _env(server, task)
    assert env._agentbench_hash() == table_hash([(f"row {i}",) for i in range(200)])
    env._close()


def test_a_failing_gold_on_mariadb_is_unscorable_with_the_servers_reason(server):
    from test_sql_credit import modify_task

    task = modify_task("UPDATE Nowhere SET x = 1")
    env = _env(server, task)
    scores = sql_score("done", task, env)
    assert scores["unscorable"] == 1.0
    assert env._score_notes()["unscorable_reason"].startswith("the gold statement fails on MariaDB: 1146")
    env._close()


def test_an_item_timeout_stops_scoring_on_the_server(server, tmp_path):
    from agentrl.core.chat import Turn
    from agentrl.envs.base import tool_schemas
    from agentrl.envs.task import Task
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.rollout.runner import RunConfig, run_batch
    from test_sql_credit import modify_task

    def plan(row):
        return [Turn(content="<answer>done</answer>", finish_reason="stop")]

    row = modify_task("UPDATE Cities SET Area = SLEEP(4)")  # scoring runs it as the gold user (5 s limit)
    task = Task(name="sql", make_env=functools.partial(mariadb.MariaDBEnv, server=server), system_prompt="",
                oracle_plan=plan, score=sql_score)
    tool_schemas(task.make_env())  # imports transformers once, outside the timing
    start = time.monotonic()
    run_batch(OraclePolicy(plan), task, [row], tmp_path, RunConfig(progress=False, item_timeout=0.5))
    (rec,) = map(json.loads, (tmp_path / "trajectories.jsonl").open())
    assert rec["error"].startswith("timeout") and time.monotonic() - start < 4
    assert running({"MariaDBServer.gold", "MariaDBEnv._run_gold"}) == []
    assert server.admin(["SELECT id FROM information_schema.processlist WHERE info LIKE 'UPDATE%SLEEP%'"]) == []
    assert server.databases() == [] and _ep_users(server) == []
