"""The agent loop and batch runner against a real OpenAI-compatible HTTP server process and the real retriever.

Tests that talk to the endpoint run once per transport (``transport`` fixture: aiohttp and the openai SDK)."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from agentrl.core.chat import parse_hermes
from agentrl.core.io import DataError, JsonlAppender, read_jsonl
from agentrl.envs.base import call_tool, tool_schemas
from agentrl.envs.search.env import LocalSearch, MCPSearch, SearchEnv, search_env_factory, search_task
from agentrl.rollout.agent import extract_answer, run_episode
from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy
from agentrl.rollout.oracle import OraclePolicy
from agentrl.rollout.runner import RunConfig, run_batch


def row(i, question, gold=("x",)):
    return {"id": f"q{i}", "question": question, "golden_answers": list(gold), "metadata": {"type": "bridge"}}


@pytest.fixture(scope="module")
def task(small_retriever):
    return search_task(LocalSearch(small_retriever), top_k=3, max_searches=3, passage_chars=200)


def policy(url, transport="aiohttp", **kw):
    return EndpointPolicy(EndpointConfig(base_url=url, model="scripted", api_key="EMPTY", backoff_base=0.01,
                                         transport=transport, **kw))


def episode(url, task, question, transport="aiohttp", **kw):
    return asyncio.run(run_episode(policy(url, transport, **kw), task, row(0, question), max_turns=4))


@pytest.mark.slow
def test_tool_call_then_answer_produces_a_complete_trajectory(endpoint_url, task, small_retriever, transport):
    traj = episode(endpoint_url, task, "Ed Wood film director", transport)
    roles = [m["role"] for m in traj["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call = traj["messages"][2]["tool_calls"][0]
    assert call["function"]["name"] == "search" and json.loads(call["function"]["arguments"]) == {
        "query": "Ed Wood film director"}
    first_title = small_retriever.search("Ed Wood film director", 3)[0].title
    assert traj["messages"][3]["content"].startswith(f"Doc 1 (Title: {first_title})")
    assert traj["prediction"] == first_title and traj["finish"] == "answer"
    assert traj["usage"]["turns"] == 2 and traj["usage"]["tool_calls"] == 1
    assert traj["usage"]["prompt_tokens"] == sum(t["prompt_tokens"] for t in traj["usage"]["per_turn"]) > 0
    assert traj["tools"][0]["function"]["name"] == "search" and traj["policy"] == "endpoint"
    assert set(traj["metrics"]) == {"em", "f1", "precision", "recall", "acc", "grounded"}


@pytest.mark.parametrize("mode,expected", [
    ("bad_json", "invalid JSON in arguments"),
    ("unknown_tool", "unknown tool 'lookup'. Available tools: search"),
])
def test_bad_tool_calls_come_back_to_the_model_as_tool_errors(endpoint_url, task, mode, expected, transport):
    traj = episode(endpoint_url, task, f"[[mode:{mode}]] Ed Wood", transport)
    tool_msg = next(m for m in traj["messages"] if m["role"] == "tool")
    assert tool_msg["content"].startswith("Error:") and expected in tool_msg["content"]
    assert traj["usage"]["tool_errors"] == 1 and traj["finish"] == "answer"


def test_tool_calls_written_as_text_are_parsed(endpoint_url, task, transport):
    traj = episode(endpoint_url, task, "[[mode:text_tool_call]] Ed Wood", transport)
    assert traj["messages"][2]["tool_calls"][0]["function"]["name"] == "search"
    assert traj["messages"][3]["role"] == "tool" and traj["finish"] == "answer"


@pytest.mark.parametrize("mode,finish", [("no_tags", "no_answer"), ("empty", "no_answer"),
                                         ("reasoning_only", "no_answer"), ("reasoning_field", "no_answer"),
                                         ("long", "length")])
def test_replies_without_an_answer_end_the_episode_cleanly(endpoint_url, task, mode, finish, transport):
    traj = episode(endpoint_url, task, f"[[mode:{mode}]] Ed Wood", transport)
    assert traj["finish"] == finish and traj["prediction"] is None and traj["metrics"]["f1"] == 0.0
    if mode == "reasoning_only":  # sent as reasoning_content
        assert traj["messages"][-1]["reasoning"].startswith("I am still thinking")
    if mode == "reasoning_field":  # sent as reasoning (vLLM, OpenRouter)
        assert traj["messages"][-1]["reasoning"].startswith("Thinking (reasoning field) about")


def test_exception_inside_a_tool_is_reported_not_raised():
    class Boom:
        def reset(self, **row):
            pass

        def explode(self, x: int) -> str:
            """Always fails.

            Args:
                x: Anything.
            """
            raise OSError("disk on fire")

    env = Boom()
    assert asyncio.run(call_tool(env, "explode", '{"x": 1}')) == ("Error: OSError: disk on fire", "tool_exception")
    content, kind = asyncio.run(call_tool(env, "explode", '{"y": 1}'))
    assert kind == "invalid_arguments"
    assert content == "Error: invalid arguments for explode: missing a required argument: 'x'"
    content, kind = asyncio.run(call_tool(env, "explode", '{"x": 1, "y": 2}'))
    assert kind == "invalid_arguments" and "unexpected keyword argument 'y'" in content


def test_answer_is_the_last_answer_tag_stripped():
    assert extract_answer("<answer> a </answer> then <answer>\n Tim Burton \n</answer>") == "Tim Burton"
    assert extract_answer("no tags") is None and extract_answer(None) is None


def test_hermes_parser_splits_reasoning_content_and_calls():
    text = ('<think>plan</think>Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "search", "arguments": {broken}\n</tool_call>')
    content, calls, reasoning = parse_hermes(text)
    assert reasoning == "plan" and content == "Let me look."
    assert calls[0] == {"id": "call_0", "name": "search", "arguments": '{"query": "x"}'}
    assert calls[1]["name"] is None
    assert parse_hermes("<tool_call>\n{\"name\": \"search\", \"arg")[1][0]["name"] is None


def test_rate_limit_and_server_error_bursts_are_retried(endpoint_url, task, transport):
    tag = uuid.uuid4().hex  # the server counts failures per conversation text
    traj = episode(endpoint_url, task, f"[[fail:429:2]] Ed Wood {tag}", transport, max_retries=3)
    assert traj["finish"] == "answer"
    traj = episode(endpoint_url, task, f"[[fail:500:2]] Tyler Bates {tag}", transport, max_retries=3)
    assert traj["finish"] == "answer"
    assert len(recorded(endpoint_url, tag)) == 2 * (2 + 2)  # per episode: 2 failures, the retry, the answer turn


def recorded(url, contains):
    """The request bodies the scripted endpoint received for conversations containing ``contains``."""
    with urllib.request.urlopen(f"{url}/_requests?{urllib.parse.urlencode({'contains': contains})}") as resp:
        return json.loads(resp.read())["data"]


def test_a_timeout_burst_is_retried_and_the_item_succeeds(endpoint_url, task, tmp_path, transport):
    tag = uuid.uuid4().hex  # the server counts slow requests per conversation text
    rows = [row(0, f"[[slow:3:2]] Ed Wood {tag}")]  # the first 2 requests outlast the 0.5 s request timeout
    metrics = run_batch(policy(endpoint_url, transport, max_retries=3, request_timeout=0.5), task, rows,
                        tmp_path / "run", RunConfig(progress=False, item_timeout=60))
    (rec,) = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    assert rec["error"] is None and rec["finish"] == "answer" and metrics["errors"] == 0
    assert len(recorded(endpoint_url, tag)) == 4  # 2 timed out, their retry, then the answer turn


def test_a_dropped_connection_is_retried(endpoint_url, task, tmp_path, transport):
    tag = uuid.uuid4().hex
    rows = [row(0, f"[[drop:2]] Ed Wood {tag}"), row(1, f"[[drop:99]] Ed Wood {tag}")]
    run_batch(policy(endpoint_url, transport, max_retries=2), task, rows, tmp_path / "run", RunConfig(progress=False))
    recs = {r["id"]: r for r in read_jsonl(tmp_path / "run" / "trajectories.jsonl")}
    assert recs["q0"]["error"] is None and recs["q0"]["finish"] == "answer"
    assert recs["q1"]["finish"] == "error" and recs["q1"]["error"].startswith("APIConnectionError")
    assert len(recorded(endpoint_url, f"[[drop:2]] Ed Wood {tag}")) == 4  # 2 dropped, the retry, the answer
    assert len(recorded(endpoint_url, f"[[drop:99]] Ed Wood {tag}")) == 3  # the first try and 2 retries


def test_items_that_keep_failing_or_time_out_are_recorded_and_the_run_goes_on(endpoint_url, task, tmp_path, transport):
    rows = [row(0, "Ed Wood"), row(1, f"[[fail:503:50]] always down {uuid.uuid4().hex}"), row(2, "[[slow:5]] too slow"),
            row(3, "Doctor Strange")]
    metrics = run_batch(policy(endpoint_url, transport, max_retries=2), task, rows, tmp_path / "run",
                        RunConfig(concurrency=4, item_timeout=2.0, progress=False))
    recs = {r["id"]: r for r in read_jsonl(tmp_path / "run" / "trajectories.jsonl")}
    assert set(recs) == {"q0", "q1", "q2", "q3"}
    assert recs["q1"]["finish"] == "error" and "503" in recs["q1"]["error"]
    assert recs["q2"]["finish"] == "error" and recs["q2"]["error"].startswith("timeout after 2s")
    assert recs["q0"]["finish"] == recs["q3"]["finish"] == "answer"
    assert metrics["errors"] == 2 and metrics["finish"] == {"answer": 2, "error": 2}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["n"] == 4


def test_duplicate_ids_are_an_error(endpoint_url, task, tmp_path):
    with pytest.raises(DataError, match="duplicate id 'q0'"):
        run_batch(policy(endpoint_url), task, [row(0, "a"), row(0, "b")], tmp_path / "run")


def test_existing_run_needs_resume_or_overwrite(endpoint_url, task, tmp_path):
    run_batch(policy(endpoint_url), task, [row(0, "Ed Wood")], tmp_path / "run", RunConfig(progress=False))
    with pytest.raises(DataError, match="--resume"):
        run_batch(policy(endpoint_url), task, [row(0, "Ed Wood")], tmp_path / "run", RunConfig(progress=False))


def test_resume_skips_finished_questions_and_retries_errored_ones(endpoint_url, task, tmp_path, transport):
    out = tmp_path / "run"
    tag = uuid.uuid4().hex  # the server counts failures per conversation text
    rows = [row(i, f"[[fail:503:3]] question {i} {tag}" if i == 2 else f"question {i}") for i in range(5)]
    run_batch(policy(endpoint_url, transport, max_retries=0), task, rows, out, RunConfig(progress=False))
    first = {r["id"]: r for r in read_jsonl(out / "trajectories.jsonl")}
    assert first["q2"]["error"] is not None
    # the scripted failure budget (3) is used up by now: the retry succeeds
    run_batch(policy(endpoint_url, transport, max_retries=3), task, rows, out, RunConfig(progress=False), resume=True)
    second = read_jsonl(out / "trajectories.jsonl")
    assert sorted(r["id"] for r in second) == [f"q{i}" for i in range(5)]
    by_id = {r["id"]: r for r in second}
    assert by_id["q2"]["error"] is None
    assert by_id["q0"]["timing"] == first["q0"]["timing"]  # finished items were not run again


def test_metrics_kept_during_a_resumed_run_equal_metrics_recomputed_from_its_file(endpoint_url, task, tmp_path):
    from agentrl.rollout.runner import finalize

    out, tag = tmp_path / "run", uuid.uuid4().hex
    rows = [row(0, "Ed Wood"), row(1, f"[[fail:503:9]] down {tag}"), row(2, "[[mode:bad_json]] Ed Wood"),
            row(3, "Doctor Strange", gold=("Scott Derrickson",)),
            {**row(4, "Tyler Bates"), "metadata": {"level": "hard"}}]
    run_batch(policy(endpoint_url, max_retries=0), task, rows[:3], out, RunConfig(progress=False))
    kept = run_batch(policy(endpoint_url, max_retries=0), task, rows, out, RunConfig(progress=False), resume=True)
    assert kept["n"] == 5 and kept["errors"] == 1 and kept["tools"]["wellformed_call_share"] < 1
    assert kept == finalize(out, rows)  # the same figures from every line of the file, read back


def test_the_heap_is_frozen_only_while_a_run_is_going(endpoint_url, task, tmp_path):
    import gc

    from agentrl.rollout.runner import arun_batch

    seen = []

    async def annotate(traj):
        seen.append(gc.get_freeze_count())

    asyncio.run(arun_batch(policy(endpoint_url), task, [row(0, "Ed Wood"), row(1, "Tyler Bates")], tmp_path / "run",
                           RunConfig(progress=False), annotate=annotate))
    assert len(seen) == 2 and min(seen) > 0 and gc.get_freeze_count() == 0


def test_resume_refuses_a_directory_run_with_other_settings(endpoint_url, task, small_retriever, tmp_path):
    out, rows = tmp_path / "run", [row(0, "Ed Wood")]
    run_batch(policy(endpoint_url), task, rows, out, RunConfig(progress=False))
    before = (out / "trajectories.jsonl").read_text()
    assert json.loads((out / "manifest.json").read_text())["fingerprint"]["policy"]["model"] == "scripted"
    other_model = EndpointPolicy(EndpointConfig(base_url=endpoint_url, model="other-model", api_key="EMPTY"))
    with pytest.raises(DataError, match=r'was run with policy.model "scripted", this run uses policy.model '
                                        r'"other-model": use another --name or --overwrite'):
        run_batch(other_model, task, rows, out, RunConfig(progress=False), resume=True)
    other_task = search_task(LocalSearch(small_retriever), top_k=2, max_searches=3, passage_chars=200)
    with pytest.raises(DataError, match=r"with task.top_k 3, this run uses task.top_k 2"):
        run_batch(policy(endpoint_url), other_task, rows, out, RunConfig(progress=False), resume=True)
    shorter = search_task(LocalSearch(small_retriever), top_k=3, max_searches=3, passage_chars=200, max_turns=3)
    with pytest.raises(DataError, match=r"with max_turns 6, policy.temperature 0.0, this run uses "
                                        r"max_turns 3, policy.temperature 0.7:"):
        run_batch(policy(endpoint_url, temperature=0.7), shorter, rows, out, RunConfig(progress=False), resume=True)
    assert (out / "trajectories.jsonl").read_text() == before  # a refused resume touches nothing
    # how the run is carried out may change: retries, timeouts, concurrency, transport
    run_batch(policy(endpoint_url, "openai", max_retries=1, request_timeout=30), task, rows + [row(1, "Tim Burton")],
              out, RunConfig(progress=False, concurrency=2, item_timeout=100), resume=True)
    assert [r["id"] for r in read_jsonl(out / "trajectories.jsonl")] == ["q0", "q1"]
    # a directory from before fingerprints (or a manifest without one) resumes as it always did
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["fingerprint"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    run_batch(other_model, task, rows, out, RunConfig(progress=False), resume=True)
    assert json.loads((out / "manifest.json").read_text())["fingerprint"]["policy"]["model"] == "other-model"
    run_batch(policy(endpoint_url), task, rows, out, RunConfig(progress=False), overwrite=True)  # always allowed


def test_appender_cuts_a_torn_tail_so_the_file_stays_readable(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "messa')
    with pytest.warns(UserWarning, match="dropping a torn final line"), JsonlAppender(path) as out:
        out.write({"id": "d"})
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b", "d"]  # strict reading: nothing torn mid-file
    path.write_text('{"id": "x", "tor')  # a file that is nothing but a fragment
    with pytest.warns(UserWarning), JsonlAppender(path) as out:
        out.write({"id": "y"})
    assert [r["id"] for r in read_jsonl(path)] == ["y"]
    path.write_text('{"id": "a"}\n{"id": "b"}')  # a complete last record without its newline is kept
    with JsonlAppender(path) as out:
        out.write({"id": "c"})
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b", "c"]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_keeps_every_id_exactly_once(endpoint_url, small_index, tmp_path, transport):
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(row(i, f"[[slow:0.4]] Ed Wood question {i}")) + "\n" for i in range(24)))
    cmd = [sys.executable, "-m", "agentrl.cli", "eval", "--qa", str(qa), "--env-arg", f"index={small_index}",
           "--name", "k", "--policy", "endpoint", "--base-url", endpoint_url, "--model", "scripted",
           "--concurrency", "3", "--endpoint-transport", transport]
    env = {**os.environ, "OPENAI_API_KEY": "EMPTY"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = tmp_path / "runs" / "eval" / "k" / "trajectories.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and (not path.exists() or path.read_text().count("\n") < 6):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = path.read_text().count("\n")
    assert 6 <= partial < 24
    subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    lines = path.read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]  # every line parses: no torn line
    assert sorted(ids) == sorted(f"q{i}" for i in range(24))
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["counts"]["resumed"] >= partial - 1


@pytest.mark.slow
def test_the_api_key_appears_in_no_file_written(tmp_path, small_index, transport):
    from conftest import SCRIPTED, free_port, start_process, stop_process

    key = "sk-test-THIS-KEY-MUST-NEVER-BE-WRITTEN-1234"
    port = free_port()
    proc = start_process([sys.executable, str(SCRIPTED), "--port", str(port), "--api-key", key],
                         port)
    try:
        qa = tmp_path / "qa.jsonl"
        qa.write_text(json.dumps(row(0, "Ed Wood")) + "\n" + json.dumps(row(1, "[[fail:500:9]] down")) + "\n")
        base = [sys.executable, "-m", "agentrl.cli", "eval", "--qa", str(qa), "--env-arg", f"index={small_index}",
                "--policy", "endpoint", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "scripted",
                "--retries", "0", "--endpoint-transport", transport]
        ok = subprocess.run(base + ["--name", "ok", "--api-key", key], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
        assert ok.returncode == 0, ok.stderr
        bad = subprocess.run(base + ["--name", "bad"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OPENAI_API_KEY": "sk-wrong-key-000000000000"})
        assert bad.returncode == 2 and "refused" in bad.stderr
        recs = read_jsonl(tmp_path / "runs" / "eval" / "ok" / "trajectories.jsonl")
        assert {r["finish"] for r in recs} == {"answer", "error"}
        for path in (tmp_path / "runs").rglob("*"):
            if path.is_file():
                assert key not in path.read_text(errors="ignore"), path
        assert key not in ok.stdout + ok.stderr
    finally:
        stop_process(proc)


def test_search_env_exposes_one_tool_with_the_transformers_schema(small_retriever):
    env = search_env_factory(LocalSearch(small_retriever), top_k=2)()
    schema = tool_schemas(env)
    assert [s["function"]["name"] for s in schema] == ["search"]
    assert schema[0]["function"]["parameters"]["required"] == ["query"]
    env.reset(id="x", question="q", golden_answers=["a"])
    out = asyncio.run(env.search("Ed Wood"))
    assert out.count("\nDoc ") == 1 and out.startswith("Doc 1 (Title: ")
    assert env.calls == 1 and env.golden_answers == ["a"]


def test_search_env_enforces_its_search_budget_as_a_refusal_the_model_reads(small_retriever):
    env = SearchEnv(LocalSearch(small_retriever), top_k=1, max_searches=1)
    env.reset(question="q")
    asyncio.run(env.search("Ed Wood"))
    content, kind = asyncio.run(call_tool(env, "search", {"query": "Tim Burton"}))
    assert content.startswith("Search limit reached") and kind == "tool_error"


def test_the_search_settings_give_the_task_its_tool_call_and_turn_budgets(small_index):
    from agentrl.envs import registry
    from conftest import search_settings

    spec = registry.get("search")
    default = spec.build(search_settings(small_index))
    assert default.max_turns == spec.max_turns == 6 and default.config["max_searches"] == 4
    task = spec.build(search_settings(small_index, max_tool_calls=1, max_turns=2))
    assert task.max_turns == 2 and "at most 1 searches" in task.system_prompt
    env = task.make_env()
    env.reset(question="q")
    asyncio.run(env.search("Ed Wood"))
    content, kind = asyncio.run(call_tool(env, "search", {"query": "Tim Burton"}))
    assert content.startswith("Search limit reached") and kind == "tool_error"


@pytest.mark.slow
def test_remote_search_env_queries_a_real_mcp_server(mcp_url, small_retriever):
    env = SearchEnv(MCPSearch(mcp_url), top_k=2)
    env.reset(question="q")
    remote = asyncio.run(env.search("Tyler Bates composer"))
    local = asyncio.run(SearchEnv(LocalSearch(small_retriever), top_k=2).search("Tyler Bates composer"))
    assert remote == local


def test_oracle_demonstrations_search_the_gold_titles_then_answer(task, hotpot_rows):
    traj = asyncio.run(run_episode(OraclePolicy(task.oracle_plan), task, hotpot_rows[0]))
    queries = [json.loads(m["tool_calls"][0]["function"]["arguments"])["query"]
               for m in traj["messages"] if m.get("tool_calls")]
    assert queries == ["Scott Derrickson", "Ed Wood"]
    assert traj["prediction"] == "yes" and traj["metrics"]["em"] == 1.0 and traj["policy"] == "oracle"


def test_local_model_policy_runs_an_episode_without_crashing(tiny_model, task, hotpot_rows):
    from agentrl.rollout.local import LocalConfig, LocalPolicy

    pol = LocalPolicy(LocalConfig(model=str(tiny_model), max_new_tokens=24))
    traj = asyncio.run(run_episode(pol, task, hotpot_rows[1], max_turns=2))
    assert traj["policy"] == "local" and traj["finish"] in {"no_answer", "length", "max_turns", "answer"}
    assert traj["usage"]["per_turn"][0]["completion_tokens"] > 0


def test_trajectories_match_the_documented_schema(endpoint_url, task, tmp_path, transport):
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("agentrl.data").joinpath("trajectory.schema.json").read_text())
    rows = [row(0, "Ed Wood"), row(1, "[[mode:bad_json]] x"), row(2, "[[fail:503:50]] down"),
            row(3, "[[mode:reasoning_only]] y")]
    run_batch(policy(endpoint_url, transport, max_retries=0), task, rows, tmp_path / "run", RunConfig(progress=False))
    recs = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    assert len(recs) == 4
    for rec in recs:
        jsonschema.validate(rec, schema)


def test_eval_with_a_judge_adds_the_verdict_to_metrics(endpoint_url, small_index, tmp_path):
    from agentrl.envs.search import SearchSettings
    from agentrl.rollout.evaluate import EvalConfig, run_eval
    from agentrl.rollout.judge import JudgeConfig

    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps(row(0, "[[mode:answer:Tim Burton]] Who directed Ed Wood?", ["Tim Burton"])) + "\n"
                  + json.dumps(row(1, "[[mode:answer:Spielberg]] Who directed Ed Wood?", ["Tim Burton"])) + "\n"
                  + json.dumps(row(2, "[[mode:answer:Tim Burton]] [[judge:garbage]] Who directed it?",
                                   ["Tim Burton"])) + "\n")
    cfg = EvalConfig(name="j", qa=str(qa), envs={"search": SearchSettings(index=str(small_index))}, policy="endpoint",
                     endpoint=EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY"),
                     judge=JudgeConfig(model="scripted-judge", base_url=endpoint_url, api_key="EMPTY",
                                       cache_dir=str(tmp_path / "cache"), retries=1),
                     run=RunConfig(progress=False))
    with pytest.warns(UserWarning, match="1 of 3 judge verdicts are fallbacks"):
        metrics = run_eval(cfg, runs=tmp_path / "runs")
    recs = {r["id"]: r for r in read_jsonl(tmp_path / "runs" / "eval" / "j" / "trajectories.jsonl")}
    assert recs["q0"]["metrics"]["judge"] == 1.0 and recs["q1"]["metrics"]["judge"] == 0.0
    assert recs["q0"]["judge"]["status"] == "ok" and recs["q2"]["judge"]["status"] == "fallback"
    assert recs["q2"]["metrics"]["judge"] == 1.0  # the fallback: exact match
    assert metrics["judge_status"] == {"ok": 2, "fallback": 1}
    assert json.loads((tmp_path / "runs" / "eval" / "j" / "metrics.json").read_text())["judge_status"] == {
        "ok": 2, "fallback": 1}


def test_a_judge_with_a_wrong_model_stops_the_eval(endpoint_url, small_index, tmp_path):
    from agentrl.envs.search import SearchSettings
    from agentrl.rollout.evaluate import EvalConfig, run_eval
    from agentrl.rollout.judge import JudgeConfig

    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps(row(0, "[[mode:answer:Tim Burton]] Who directed Ed Wood?", ["Tim Burton"])) + "\n")
    cfg = EvalConfig(name="j", qa=str(qa), envs={"search": SearchSettings(index=str(small_index))}, policy="endpoint",
                     endpoint=EndpointConfig(base_url=endpoint_url, model="scripted", api_key="EMPTY"),
                     judge=JudgeConfig(model="missing-judge", base_url=endpoint_url, api_key="EMPTY",
                                       cache_dir=str(tmp_path / "cache")),
                     run=RunConfig(progress=False))
    with pytest.raises(DataError, match="refused the run: judge model 'missing-judge'.*NotFoundError"):
        run_eval(cfg, runs=tmp_path / "runs")
    # nothing was recorded as judged: a rerun with the right model can --resume
    assert read_jsonl(tmp_path / "runs" / "eval" / "j" / "trajectories.jsonl") == []


def test_concurrent_local_episodes_share_generate_calls_and_match_one_at_a_time(tiny_model, task, hotpot_rows):
    from agentrl.rollout.local import LocalConfig, LocalPolicy, load_inference_model

    model, tok = load_inference_model(tiny_model)

    async def episodes(max_batch):
        pol = LocalPolicy(LocalConfig(model=str(tiny_model), max_new_tokens=24, max_batch=max_batch, batch_wait_s=0.5),
                          model=model, tokenizer=tok)
        trajs = await asyncio.gather(*(run_episode(pol, task, row, max_turns=2) for row in hotpot_rows[:4]))
        return pol.batch_sizes, [[m.get("content") for m in t["messages"]] for t in trajs]

    batched_sizes, batched = asyncio.run(episodes(4))
    single_sizes, single = asyncio.run(episodes(1))
    assert max(batched_sizes) > 1 and set(single_sizes) == {1}
    assert batched == single  # left padding changes nothing under greedy decoding


def test_local_batcher_skips_a_cancelled_request_and_keeps_serving():
    import threading
    import time

    from agentrl.rollout.local import _Batcher

    gate = threading.Event()

    def double(requests):
        gate.wait(5)
        return [r * 2 for r in requests]

    batcher = _Batcher(double, max_batch=4, wait_s=0.0)
    first = batcher.submit(1)
    time.sleep(0.2)  # the worker is now blocked inside the first batch
    timed_out, waiting = batcher.submit(2), batcher.submit(4)  # both go into the next batch
    assert timed_out.cancel()  # what asyncio does to the future of an episode that hit its timeout
    gate.set()
    assert first.result(5) == 2
    assert waiting.result(5) == 8  # its batch-mate's cancellation did not lose its result
    assert batcher.submit(3).result(5) == 6


def test_an_idle_batcher_lets_go_of_its_worker_and_the_policy_then_serves_again():
    # the worker thread holds the policy's model: a worker that outlived its evaluation kept every model in memory
    import gc
    import weakref

    from agentrl.rollout.local import _Batcher

    class Model:
        def __call__(self, requests):
            return [r + 1 for r in requests]

    model = Model()
    alive = weakref.ref(model)
    batcher = _Batcher(model, max_batch=4, wait_s=0.0)
    batcher.idle_s = 0.05
    assert batcher.submit(1).result(5) == 2
    worker = batcher._thread
    worker.join(5)
    assert not worker.is_alive() and batcher._thread is None
    assert batcher.submit(2).result(5) == 3  # a new worker starts for the next request
    batcher._thread.join(5)
    del batcher, model
    gc.collect()
    assert alive() is None


def test_search_episodes_report_whether_the_answer_was_in_the_passages_shown(small_retriever):
    from agentrl.envs.search.env import LocalSearch, grounded, search_task

    task = search_task(LocalSearch(small_retriever), top_k=2, passage_chars=200)
    env = task.make_env()
    env.reset(question="Who directed Ed Wood?", golden_answers=["Tim Burton"])
    shown = asyncio.run(env.search("Ed Wood film"))
    assert "Tim Burton" in shown
    assert task.score("Tim Burton", env.row, env)["grounded"] == 1.0
    assert task.score("Steven Spielberg", env.row, env)["grounded"] == 0.0  # not in what it read
    assert grounded("Yes", []) == 1.0 and grounded(None, [shown]) == 0.0 and grounded("", [shown]) == 0.0
