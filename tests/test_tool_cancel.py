"""An item timeout stops the tool call's work: no thread is still running it once the item is recorded."""

import functools
import json
import time
from pathlib import Path

from agentrl.core.chat import Turn
from agentrl.envs.base import tool_schemas
from agentrl.envs.task import Task
from agentrl.rollout.oracle import OraclePolicy
from agentrl.rollout.runner import RunConfig, run_batch
from conftest import running


def _timed_out_run(tmp_path, make_env, score, tool: str, arguments: dict, row: dict) -> float:
    """Run one item whose only tool call outlasts a 0.5 s item timeout; return the seconds until it was recorded."""
    call = {"id": "c0", "name": tool, "arguments": json.dumps(arguments)}

    def plan(row):
        return [Turn(tool_calls=[call]), Turn(content="<answer>x</answer>")]

    task = Task(name="t", make_env=make_env, system_prompt="", oracle_plan=plan, score=score)
    tool_schemas(make_env())  # imports transformers once, outside the timing
    start = time.monotonic()
    run_batch(OraclePolicy(plan), task, [row], tmp_path, RunConfig(progress=False, item_timeout=0.5))
    elapsed = time.monotonic() - start
    (rec,) = map(json.loads, (tmp_path / "trajectories.jsonl").open())
    assert rec["error"].startswith("timeout")
    return elapsed


def test_a_cancelled_sqlite_statement_is_interrupted(tmp_path):
    from agentrl.envs.sql.dbbench import load_dbbench
    from agentrl.envs.sql.env import SQLEnv, sql_score
    from agentrl.envs.sql.sandbox import SQLLimits
    from conftest import DBBENCH

    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    elapsed = _timed_out_run(tmp_path, functools.partial(SQLEnv, limits=SQLLimits(time_limit=60)), sql_score,
                             "execute_sql", {"query": forever}, load_dbbench(DBBENCH)[0])
    assert elapsed < 3  # not the 60 s statement limit
    assert running({"run_statement"}) == []


def _sleepers() -> list[int]:
    """Pids of live processes whose command line holds the marker the sandboxed program below carries."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"agentrl-cancel-marker" in (proc / "cmdline").read_bytes() + \
                    _main_py(proc):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _main_py(proc: Path) -> bytes:
    """The sandboxed program's source, when the process runs one (its main.py in the cwd)."""
    try:
        return (proc / "cwd" / "main.py").read_bytes()
    except OSError:
        return b""


def test_a_cancelled_python_run_is_killed(tmp_path):
    from agentrl.envs.code.env import CodeEnv, code_score, humaneval_tasks

    code = "# agentrl-cancel-marker\nimport time\ntime.sleep(60)"
    elapsed = _timed_out_run(tmp_path, CodeEnv, code_score, "run_python", {"code": code}, humaneval_tasks()[0])
    assert elapsed < 3
    assert running({"run_python"}) == []
    assert _sleepers() == []


def test_the_mixed_env_passes_the_interrupt_on(tmp_path):
    from agentrl.envs.mixed.env import MixedEnv, mixed_score
    from agentrl.envs.sql.dbbench import load_dbbench
    from conftest import DBBENCH

    row = {**load_dbbench(DBBENCH)[0], "env": "sql"}
    env = MixedEnv()
    env.reset(**row)
    env._envs["sql"]._limits.time_limit = 60
    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    elapsed = _timed_out_run(tmp_path, lambda: env, mixed_score, "execute_sql", {"query": forever}, row)
    assert elapsed < 3 and running({"run_statement"}) == []
