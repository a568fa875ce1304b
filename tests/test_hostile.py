"""Hostile replies, queries and writers against real processes: the scripted endpoint, the MCP server, the CLI.

The hostile-reply corpus (``scripted_endpoint.HOSTILE``) is run in one batch; each kind has an expected
outcome below. No reply may crash the runner, lose an item, leak the key or leave a line that cannot be read.
The endpoint tests run once per transport (``transport`` fixture: aiohttp and the openai SDK).
"""

import asyncio
import json
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.core.io import DataError
from agentrl.envs.search.env import LocalSearch, SearchEnv, search_task
from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy
from agentrl.rollout.runner import RunConfig, RunLock, arun_batch, run_batch
from conftest import SCRIPTED, free_port, start_process, stop_process
from scripted_endpoint import HOSTILE

KEY = "sk-test-Zq81-very-secret-key"

MALFORMED = {"truncated_json", "empty_body", "html_body", "plain_text", "json_null", "json_array", "json_string",
             "json_number", "invalid_utf8", "nan_choices", "no_choices", "empty_choices", "null_choices",
             "string_choices", "choice_not_object", "message_null", "message_string", "error_object_200"}
ANSWERED = {"truncated_json_once", "empty_body_once", "html_body_once", "content_parts", "content_parts_split",
            "content_string_parts", "content_parts_with_image", "usage_strings", "usage_floats", "usage_negative",
            "usage_null", "usage_list", "usage_string", "usage_bools", "usage_nested", "usage_absent",
            "finish_reason_number", "finish_reason_null", "finish_reason_object", "reasoning_parts",
            "reasoning_number", "extra_fields", "completions_style", "role_missing", "lone_surrogate",
            "lone_surrogate_reasoning", "nul_bytes", "huge_content", "unicode_mix", "answer_twice", "echo_key",
            "echo_key_in_reasoning", "tool_calls_null", "tool_calls_string"}
NO_ANSWER = {"content_number", "content_object"}
# tool-call kinds: the error kind of the first tool message (None: the call ran), then the script answers
TOOL = {"tool_call_not_object": "invalid_tool_call", "tool_call_no_function": "invalid_tool_call",
        "function_not_object": "invalid_tool_call", "function_name_null": "invalid_tool_call",
        "function_name_number": "invalid_tool_call", "function_name_empty": "invalid_tool_call",
        "hermes_broken": "invalid_tool_call", "unknown_tool": "unknown_tool", "echo_key_in_tool_name": "unknown_tool",
        "arguments_object": None, "arguments_null": "invalid_arguments", "arguments_number": "invalid_arguments",
        "arguments_list": "invalid_arguments", "arguments_invalid_json": "invalid_arguments",
        "arguments_deeply_nested": "invalid_arguments", "arguments_oversized": "invalid_arguments",
        "arguments_long_query": "tool_exception", "arguments_extra_key": "invalid_arguments",
        "arguments_object_deeply_nested": "invalid_arguments", "arguments_object_nested": "invalid_arguments",
        "arguments_object_oversized": "invalid_arguments", "hermes_deeply_nested": "invalid_tool_call",
        "arguments_wrong_type": "tool_exception", "query_empty": "tool_exception", "query_no_terms": None,
        "query_punctuation": None, "query_nul": None, "many_calls": None, "duplicate_call_ids": None,
        "call_id_missing": None, "echo_key_in_tool_args": None}
HTTP = {"status_400": "endpoint_rejected", "status_422": "endpoint_rejected",
        "status_500_always": "endpoint_unavailable", "status_503_html": "endpoint_unavailable"}


def test_the_expectations_cover_every_hostile_kind():
    covered = [*MALFORMED, *ANSWERED, *NO_ANSWER, *TOOL, *HTTP]
    assert len(covered) == len(set(covered)) and set(covered) == set(HOSTILE) and len(HOSTILE) >= 60


@pytest.fixture(scope="module")
def keyed_endpoint():
    port = free_port()
    proc = start_process([sys.executable, str(SCRIPTED), "--port", str(port),
                          "--api-key", KEY], port)
    yield f"http://127.0.0.1:{port}/v1"
    stop_process(proc)


def _rows(kinds):
    # a fresh tag per call: the server counts attempts per conversation text ("*_once" kinds misbehave once)
    tag = uuid.uuid4().hex[:8]
    return [{"id": k, "question": f"[[hostile:{k}]] What is the capital of France? {tag}", "golden_answers": ["Paris"]}
            for k in kinds]


def _policy(url, transport, retries=2):
    return EndpointPolicy(EndpointConfig(base_url=url, model="scripted", api_key=KEY, max_retries=retries,
                                         backoff_base=0.001, backoff_max=0.01, request_timeout=30,
                                         transport=transport))


def test_every_hostile_reply_ends_as_its_expected_outcome_and_nothing_leaks(keyed_endpoint, small_retriever, tmp_path,
                                                                           transport):
    task = search_task(LocalSearch(small_retriever), top_k=2, max_searches=4, max_turns=3)
    out = tmp_path / "run"
    metrics = run_batch(_policy(keyed_endpoint, transport), task, _rows(sorted(HOSTILE)), out,
                        RunConfig(concurrency=16, progress=False))
    raw = (out / "trajectories.jsonl").read_bytes()
    lines = raw.decode("utf-8").splitlines()  # strict UTF-8: lone surrogates were replaced before writing
    recs = {r["id"]: r for r in map(json.loads, lines)}
    assert len(lines) == len(recs) == len(HOSTILE) and metrics["missing"] == 0
    for kind in MALFORMED:
        assert (recs[kind]["finish"], recs[kind]["error_kind"]) == ("error", "malformed_reply"), kind
    for kind, expected in HTTP.items():
        assert (recs[kind]["finish"], recs[kind]["error_kind"]) == ("error", expected), kind
    for kind in ANSWERED:
        r = recs[kind]
        assert r["error"] is None and r["finish"] == "answer" and r["metrics"]["em"] == 1.0, (kind, r["error"])
    for kind in NO_ANSWER:
        assert recs[kind]["error"] is None and recs[kind]["finish"] == "no_answer", kind
    for kind, tool_error in TOOL.items():
        r = recs[kind]
        tools = [m for m in r["messages"] if m["role"] == "tool"]
        assert r["error"] is None and r["finish"] == "answer" and tools, kind
        assert tools[0].get("error") == tool_error, (kind, tools[0]["content"][:200])
    assert recs["usage_strings"]["usage"]["prompt_tokens"] == 12
    assert recs["usage_negative"]["usage"]["prompt_tokens"] is None
    assert "\ufffd" in recs["lone_surrogate"]["messages"][-1]["content"]
    assert KEY.encode() not in raw and "***" in recs["echo_key"]["messages"][-1]["content"]
    for path in out.iterdir():
        assert KEY.encode() not in path.read_bytes(), path.name
    assert metrics["error_kinds"] == {"malformed_reply": len(MALFORMED), "endpoint_rejected": 2,
                                      "endpoint_unavailable": 2}


def test_deep_or_oversized_argument_objects_come_back_to_the_model_as_tool_errors(keyed_endpoint, small_retriever,
                                                                                   tmp_path, transport):
    task = search_task(LocalSearch(small_retriever), top_k=2)
    kinds = ["arguments_object_deeply_nested", "arguments_object_nested", "arguments_object_oversized",
             "arguments_deeply_nested", "hermes_deeply_nested"]
    run_batch(_policy(keyed_endpoint, transport), task, _rows(kinds), tmp_path / "r", RunConfig(progress=False))
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines())}
    first_tool = {k: next(m for m in recs[k]["messages"] if m["role"] == "tool") for k in kinds}
    for kind in ("arguments_object_deeply_nested", "arguments_object_nested"):
        assert "arguments nested deeper than 64 levels" in first_tool[kind]["content"], kind
        assert len(recs[kind]["messages"][2]["tool_calls"][0]["function"]["arguments"]) < 100  # not forwarded
    assert "exceed the limit of 100,000" in first_tool["arguments_object_oversized"]["content"]
    assert "nested too deeply" in first_tool["arguments_deeply_nested"]["content"]
    for kind in kinds:  # the model read the error and went on to answer
        assert recs[kind]["error"] is None and recs[kind]["metrics"]["em"] == 1.0, (kind, recs[kind]["error"])


def test_a_truncated_body_is_retried_and_recorded_only_after_the_retries(keyed_endpoint, small_retriever, tmp_path,
                                                                         transport):
    task = search_task(LocalSearch(small_retriever), top_k=2)
    rows = _rows(["truncated_json_once", "truncated_json"])
    run_batch(_policy(keyed_endpoint, transport, retries=3), task, rows, tmp_path / "r", RunConfig(progress=False))
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines())}
    assert recs["truncated_json_once"]["metrics"]["em"] == 1.0
    assert "after 4 attempts" in recs["truncated_json"]["error"]


def test_resume_after_failed_items_reruns_only_them(keyed_endpoint, small_retriever, tmp_path, transport):
    task = search_task(LocalSearch(small_retriever), top_k=2)
    rows = _rows(["status_400", "content_parts", "lone_surrogate"])
    run_batch(_policy(keyed_endpoint, transport), task, rows, tmp_path / "r", RunConfig(progress=False))
    again = run_batch(_policy(keyed_endpoint, transport), task, rows, tmp_path / "r", RunConfig(progress=False),
                      resume=True)
    recs = [json.loads(line) for line in (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in recs) == sorted(r["id"] for r in rows) and again["errors"] == 1


def test_eval_exits_non_zero_when_every_item_failed_and_names_the_error_kinds(keyed_endpoint, small_index, tmp_path,
                                                                             capsys, monkeypatch, transport):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in _rows(["status_400", "status_422"])))
    args = ["eval", "--qa", str(qa), "--env-arg", f"index={small_index}", "--policy", "endpoint", "--base-url",
            keyed_endpoint, "--model", "scripted", "--name", "bad", "--endpoint-transport", transport]
    assert main(args) == 1
    assert "2 of 2 items failed: endpoint_rejected 2" in capsys.readouterr().err
    qa.write_text("".join(json.dumps(r) + "\n" for r in _rows(["status_400", "content_parts"])))
    assert main([*args, "--overwrite"]) == 0


def test_a_second_writer_on_the_same_run_stops_at_once_naming_the_holder(keyed_endpoint, small_retriever, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom agentrl.rollout.runner import RunLock\n"
                               f"with RunLock({str(out)!r}):\n    print('locked', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        task = search_task(LocalSearch(small_retriever), top_k=2)
        with pytest.raises(DataError, match=rf"being written by another process \(pid {holder.pid}\)"):
            run_batch(_policy(keyed_endpoint, "aiohttp"), task, _rows(["content_parts"]), out,
                      RunConfig(progress=False))
        assert not (out / "trajectories.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(out):  # released by the kernel when the holder died
        pass


def test_a_second_writer_is_told_the_run_is_held_even_when_the_file_exists_and_no_flag_is_given(keyed_endpoint,
                                                                                                small_retriever,
                                                                                                tmp_path):
    out = tmp_path / "r"
    task = search_task(LocalSearch(small_retriever), top_k=2)
    run_batch(_policy(keyed_endpoint, "aiohttp"), task, _rows(["content_parts"]), out, RunConfig(progress=False))
    before = (out / "trajectories.jsonl").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom agentrl.rollout.runner import RunLock\n"
                               f"with RunLock({str(out)!r}):\n    print('locked', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for flags in ({}, {"resume": True}, {"overwrite": True}):
            with pytest.raises(DataError, match=rf"being written by another process \(pid {holder.pid}\)"):
                run_batch(_policy(keyed_endpoint, "aiohttp"), task, _rows(["content_parts"]), out,
                          RunConfig(progress=False), **flags)
        assert (out / "trajectories.jsonl").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(DataError, match="exists: pass --resume"):  # unheld, the flags are what is missing
        run_batch(_policy(keyed_endpoint, "aiohttp"), task, _rows(["content_parts"]), out, RunConfig(progress=False))


# A run in its own process whose trajectories file stops taking writes at item q3: the size limit (RLIMIT_FSIZE,
# a real EFBIG from the kernel) is set to the file's current size just before q3 is written; with "unserialisable"
# q3's record also holds an object JSON cannot encode, so its error record is what meets the full file.
LIMITED_RUN = '''
import asyncio, resource, sys
from pathlib import Path
from agentrl.envs.math.env import oracle_plan
from agentrl.core.io import DataError
from agentrl.rollout.oracle import OraclePolicy
from agentrl.rollout.runner import RunConfig, arun_batch
from agentrl.envs.math import math_task

out, secret, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = [{"id": f"q{i}", "question": f"What is {i} + {i}? (ticket {secret})", "golden_answers": [str(2 * i)],
         "metadata": {"calculations": [f"{i} + {i}"]}} for i in range(6)]

async def annotate(traj):
    if traj["id"] == "q3":
        if mode == "unserialisable":
            traj["metadata"]["handle"] = object()
        size = (out / "trajectories.jsonl").stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

try:
    asyncio.run(arun_batch(OraclePolicy(oracle_plan), math_task(), rows, out, RunConfig(concurrency=1, progress=False),
                           annotate=annotate, extra_secrets=(secret,)))
except DataError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["unserialisable", "serialisable"])
def test_a_file_that_stops_taking_records_stops_the_run_cleanly_and_resume_finishes_it(tmp_path, mode):
    from agentrl.envs.math import math_task
    from agentrl.envs.math.env import oracle_plan
    from agentrl.rollout.oracle import OraclePolicy

    secret = "sk-run-Yy72-do-not-write"
    script, out = tmp_path / "limited_run.py", tmp_path / "run"
    script.write_text(LIMITED_RUN)
    proc = subprocess.run([sys.executable, str(script), str(out), secret, mode], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{out / 'trajectories.jsonl'}: a record could not be written (OSError: [Errno 27] File too large" \
        in proc.stderr and "The 3 records already in the file are intact" in proc.stderr and "--resume" in proc.stderr
    assert "Traceback" not in proc.stderr and secret not in proc.stderr
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["q0", "q1", "q2"]  # complete lines only
    # resume in this process, without the limit: the finished records are kept, the rest is run
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}? (ticket {secret})", "golden_answers": [str(2 * i)],
             "metadata": {"calculations": [f"{i} + {i}"]}} for i in range(6)]
    metrics = asyncio.run(arun_batch(OraclePolicy(oracle_plan), math_task(), rows, out,
                                     RunConfig(concurrency=1, progress=False), resume=True, extra_secrets=(secret,)))
    recs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == [f"q{i}" for i in range(6)] and lines == [json.dumps(r, ensure_ascii=False,
                                                                                 separators=(",", ":"))
                                                                                      for r in recs[:3]]
    assert metrics["missing"] == 0 and metrics["overall"]["em"] == 1.0
    for path in out.iterdir():
        assert secret.encode() not in path.read_bytes(), path.name


def test_a_line_the_disk_takes_only_part_of_is_cut_back_and_refused(tmp_path):
    # a file-size limit 10 bytes past the end: the kernel writes 10 bytes of the next line and reports success
    script = """
import os, resource, sys
from agentrl.core.io import JsonlAppender, read_jsonl
path = sys.argv[1]
with JsonlAppender(path) as out:
    out.write({"id": 1})
    size = os.path.getsize(path)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
    try:
        out.write({"id": 2, "text": "x" * 100})
    except OSError as exc:
        print("refused:", exc)
    print("size kept:", os.path.getsize(path) == size)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    out.write({"id": 3})
print("ids:", [r["id"] for r in read_jsonl(path)])
"""
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "t.jsonl")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: [Errno 28] short write (10 of" in proc.stdout
    assert "size kept: True" in proc.stdout and "ids: [1, 3]" in proc.stdout


def test_an_unserialisable_record_becomes_a_scrubbed_error_record_and_the_run_goes_on(tmp_path):
    from agentrl.envs.math import math_task
    from agentrl.envs.math.env import oracle_plan
    from agentrl.rollout.oracle import OraclePolicy

    secret = "sk-run-Qq19-do-not-write"

    class Handle:
        def __repr__(self):
            return f"<handle {secret}>"

    async def annotate(traj):
        if traj["id"] == "q1":
            traj["metadata"]["handle"] = Handle()

    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}? (ticket {secret})", "golden_answers": [str(2 * i)]}
            for i in range(3)]
    out = tmp_path / "run"
    metrics = asyncio.run(arun_batch(OraclePolicy(oracle_plan), math_task(), rows, out,
                                     RunConfig(concurrency=1, progress=False), annotate=annotate,
                                     extra_secrets=(secret,)))
    recs = {r["id"]: r for r in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    assert recs["q1"]["error_kind"] == "write_error" and "not JSON serialisable: Handle" in recs["q1"]["error"]
    assert recs["q1"]["question"] == "What is 1 + 1? (ticket ***)" and metrics["missing"] == 0
    assert recs["q0"]["error"] is None and recs["q2"]["error"] is None
    assert secret.encode() not in (out / "trajectories.jsonl").read_bytes()


# ----------------------------------------------------------------------------- queries


POISON = ["the of and", "?", "é", "!!!", "a an the"]


@pytest.mark.parametrize("method", ["bm25", "hybrid"])
def test_a_query_without_searchable_terms_fails_nothing_else_in_its_batch(small_retriever, method):
    backend = LocalSearch(small_retriever, method)
    good = ["Ed Wood film", "Scott Derrickson director", "Doctor Strange", "Tyler Bates composer"] * 3

    async def main_():
        envs = [SearchEnv(backend, top_k=2) for _ in good + POISON]
        return await asyncio.gather(*(e.search(q) for e, q in zip(envs, good + POISON, strict=True)),
                                    return_exceptions=True)

    results = asyncio.run(main_())
    assert not [r for r in results if isinstance(r, BaseException)]
    assert all("(Title:" in r for r in results[:len(good)])
    if method == "bm25":
        assert all("(Title:" not in r for r in results[len(good):])


def test_search_command_prints_one_line_for_a_query_without_terms(small_index, capsys):
    assert main(["search", "--index", str(small_index), "--method", "bm25", "the of and"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("no passage matches") and "\n" not in out


def test_the_search_tool_query_limit_comes_from_the_eval_and_grpo_search_tables(keyed_endpoint, small_index,
                                                                                small_retriever, tmp_path):
    from agentrl.app.presets import load
    from agentrl.envs.search import SearchSettings
    from agentrl.rollout.evaluate import EvalConfig, build_task
    from agentrl.train import grpo

    async def search(task, query):
        env = task.make_env()
        env.reset(question="Q?", golden_answers=["a"])
        return await env.search(query)

    default = build_task(EvalConfig(envs={"search": SearchSettings(index=str(small_index))}))
    assert "max_query_chars" not in default.config  # unchanged fingerprint for runs made before the setting
    with pytest.raises(ValueError, match=r"query too long: 2,001 characters \(limit 2,000\)"):
        asyncio.run(search(default, "x" * 2001))
    preset_file = tmp_path / "limits.toml"
    preset_file.write_text(f'[eval.search]\nindex = "{small_index}"\nmax_query_chars = 40\n'
                           f'[grpo.search]\nindex = "{small_index}"\nmax_query_chars = 30\n')
    preset = load(str(preset_file))
    evaluated, trained = build_task(preset.eval(), preset.data), grpo.build_task(preset.grpo(), preset.data)
    assert evaluated.config["max_query_chars"] == 40 and trained.config["max_query_chars"] == 30
    assert "(Title:" in asyncio.run(search(evaluated, "Ed Wood film " + "x" * 27))  # 40 characters
    with pytest.raises(ValueError, match=r"41 characters \(limit 40\)"):
        asyncio.run(search(evaluated, "Ed Wood film " + "x" * 28))
    with pytest.raises(ValueError, match=r"31 characters \(limit 30\)"):
        asyncio.run(search(trained, "x" * 31))
    with pytest.raises(DataError, match="max_query_chars must be a positive integer"):
        build_task(EvalConfig(envs={"search": SearchSettings(index=str(small_index), max_query_chars=0)}))
    # end to end: a 6,000-character query from the endpoint is a tool error by default and runs under a higher limit
    for limit, expected in ((None, "tool_exception"), (10_000, None)):
        task = search_task(LocalSearch(small_retriever), top_k=2, max_query_chars=limit)
        run_batch(_policy(keyed_endpoint, "aiohttp"), task, _rows(["arguments_long_query"]), tmp_path / str(limit),
                  RunConfig(progress=False))
        (rec,) = map(json.loads, (tmp_path / str(limit) / "trajectories.jsonl").read_text().splitlines())
        assert next(m for m in rec["messages"] if m["role"] == "tool").get("error") == expected


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


@pytest.fixture
def mcp_server(small_index):
    """A fresh MCP server process over the sample index (its memory is measured): ``(process, url)``."""
    port = free_port()
    proc = start_process([sys.executable, "-m", "agentrl.cli", "serve", "--index", str(small_index),
                          "--transport", "http", "--port", str(port)], port)
    yield proc, f"http://127.0.0.1:{port}/mcp"
    stop_process(proc)


@pytest.mark.slow
def test_mcp_server_refuses_long_queries_at_once_with_bounded_memory_and_keeps_serving(mcp_server):
    from mcp import Client

    proc, url = mcp_server

    async def run():
        async with Client(url) as client:
            ok = await client.call_tool("search", {"query": "Ed Wood film", "top_k": 2})
            assert not ok.is_error
            poisoned = await asyncio.gather(*(client.call_tool("search", {"query": q, "top_k": 2})
                                              for q in POISON + ["Ed Wood film"] * 5))
            assert not any(r.is_error for r in poisoned)
            before = _rss_kb(proc.pid)
            started = time.perf_counter()
            errors = []
            for i in range(200):  # distinct 1 MB queries: none may be cached or searched
                r = await client.call_tool("search", {"query": f"{i} " + "x" * 1_000_000, "top_k": 2})
                errors.append(r.is_error and "query too long" in r.content[0].text)
            per_call = (time.perf_counter() - started) / 200
            after = _rss_kb(proc.pid)
            again = await client.call_tool("search", {"query": "Ed Wood film", "top_k": 2})
            return errors, (after - before) / 1024, per_call, again

    errors, growth_mb, per_call, again = asyncio.run(run())
    assert all(errors) and not again.is_error
    assert growth_mb < 150, f"server RSS grew {growth_mb:.0f} MB over 200 distinct 1 MB queries"


def _long_query(i: int, chars: int) -> str:
    """A distinct query of exactly ``chars`` characters made of words the sample corpus holds."""
    words = ["Ed", "Wood", "film", "director", "Scott", "Derrickson", "American", "Doctor", "Strange", "composer",
             "Tyler", "Bates", "nationality", "born", "California", "movie", "science", "fiction", "actor", "writer"]
    rng = np.random.default_rng(i)
    text = f"query {i}:"
    while len(text) < chars:
        text += " " + words[rng.integers(len(words))]
    return text[:chars]


# RSS the server may gain over 200 distinct queries just under the limit. Measured +26 MB (+60 MB with the former
# cache of one array and the full text per query); the cached vectors are ~0.3 MB of it, the rest is the allocator
# keeping the encoder's freed buffers (docs/decisions.md, issue 15).
RSS_BOUND_MB = 100


@pytest.mark.slow
def test_mcp_server_memory_stays_bounded_over_distinct_queries_just_under_the_limit(mcp_server):
    from mcp import Client

    proc, url = mcp_server
    queries = [_long_query(i, 1_999) for i in range(208)]
    assert len(set(queries)) == 208 and {len(q) for q in queries} == {1_999}

    async def run():
        async with Client(url) as client:
            for q in queries[:8]:  # warm-up: the encoder's buffers for long inputs
                await client.call_tool("search", {"query": q, "top_k": 2})
            rss = [_rss_kb(proc.pid)]
            for _ in range(2):  # 200 distinct queries, each searched (and its vector cached); then the same again
                for q in queries[8:]:
                    r = await client.call_tool("search", {"query": q, "top_k": 2})
                    assert not r.is_error and len(r.structured_content["result"]) == 2, r.content
                rss.append(_rss_kb(proc.pid))
            return rss

    rss = asyncio.run(run())
    growth = [(b - a) / 1024 for a, b in zip(rss, rss[1:], strict=False)]
    print(f"RSS {rss[0] / 1024:.0f} MB, growth over 200 distinct 1,999-character queries: {growth[0]:.1f} MB, "
          f"over the same 200 again: {growth[1]:.1f} MB")
    assert growth[0] < RSS_BOUND_MB, f"server RSS grew {growth[0]:.0f} MB over 200 distinct queries"
    assert growth[1] < RSS_BOUND_MB / 5, f"server RSS grew {growth[1]:.0f} MB over 200 cached queries"


def test_analyze_refuses_a_trajectory_without_messages_naming_file_and_line(tmp_path, capsys):
    good = {"id": "1", "question": "Q?", "messages": [], "metrics": {"f1": 1.0}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({k: v for k, v in good.items() if k != "messages"}) + "\n")
    assert main(["analyze", str(path), "--out", str(tmp_path / "a")]) == 2
    assert f"{path}:2: missing field 'messages'" in capsys.readouterr().err
