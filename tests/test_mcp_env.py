"""The mcp environment against real MCP servers (no mocks): a small Python stdio server written with the mcp SDK
(tests/mcp_stdio_server.py: typed tools, a tool named with a dash, an image, refusals, a crash and a hang),
agentrl's own retrieval server over streamable HTTP, and the npm filesystem server (installed by .ci/run; skipped
with the reason without it). Through the real entry points: eval -> curate -> export -> a GRPO step on the tiny
model."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.core.io import DataError
from agentrl.envs import registry
from agentrl.envs.base import call_tool, tool_schemas
from conftest import ROOT

SERVER = ROOT / "tests" / "mcp_stdio_server.py"
NPM_FS = ROOT / "build" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
SPEC = registry.get("mcp")


def notes_task(**settings):
    """The Task over the Python stdio server with ``settings`` on top of its command."""
    return SPEC.build(SPEC.settings(command=sys.executable, args=[str(SERVER)], **settings), {})


def call(env, name, **arguments):
    return asyncio.run(call_tool(env, name, json.dumps(arguments)))


def cli(args, cwd, env=None, ok=True, timeout=900):
    r = subprocess.run([sys.executable, "-m", "agentrl.cli", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})
    if ok:
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r


def test_a_servers_tools_are_methods_with_the_schemas_types_and_calls_go_out_under_the_servers_names():
    task = notes_task()
    env = task.make_env()
    env.reset(id="t", question="q", golden_answers=["Paris"])
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(env)}
    assert set(schemas) == {"read_note", "write_note", "count", "picture", "fault"}  # "write-note" as an identifier
    write = schemas["write_note"]["parameters"]
    assert write["required"] == ["key", "text"] and write["properties"]["repeat"]["type"] == "integer"
    assert schemas["count"]["parameters"]["properties"]["case_sensitive"]["type"] == "boolean"
    assert call(env, "write_note", key="k", text="ab", repeat=3) == ("stored 6 characters under k", None)
    assert call(env, "read_note", key="k") == ("ababab", None)
    assert call(env, "count") == ("2", None)  # optional arguments left out of the call: the server's defaults
    assert call(env, "picture") == ("[image: image/png, 102 bytes]", None)
    text, kind = call(env, "read_note", key="missing")
    assert kind == "tool_error" and "no note under 'missing'" in text  # the server's isError answer
    assert call(env, "read_note", key=3)[1] == "tool_error"  # a wrong type: the server refuses, the episode goes on
    assert SPEC.score("Paris", {}, env)["em"] == 1.0 and env._tool_errors == 2
    env._close()
    assert "Notes are short texts" in task.system_prompt  # the server's instructions


def test_a_crashed_server_is_a_tool_error_for_the_rest_of_its_episode_and_restarted_for_the_next():
    env = notes_task().make_env()
    env.reset(id="a", question="q", golden_answers=["x"])
    text, kind = call(env, "fault", kind="crash")
    assert kind == "tool_error" and "closed the connection" in text
    assert "stopped answering earlier in this episode" in call(env, "read_note", key="capital")[0]
    env.reset(id="b", question="q", golden_answers=["x"])
    assert call(env, "read_note", key="capital") == ("Paris", None)
    env._close()


def test_a_hung_call_ends_at_the_call_timeout_and_the_next_episode_gets_a_new_server():
    env = notes_task(call_timeout=2.0).make_env()
    env.reset(id="a", question="q", golden_answers=["x"])
    start = time.monotonic()
    text, kind = call(env, "fault", kind="hang")
    assert kind == "tool_error" and "within 2 s" in text and time.monotonic() - start < 30
    env.reset(id="b", question="q", golden_answers=["x"])
    assert call(env, "read_note", key="capital") == ("Paris", None)
    env._close()


def test_a_shared_session_keeps_the_servers_state_across_episodes_and_one_per_episode_does_not():
    shared = notes_task(session="shared").make_env()
    shared.reset(id="a", question="q", golden_answers=["x"])
    call(shared, "write_note", key="k", text="kept")
    shared.reset(id="b", question="q", golden_answers=["x"])
    assert call(shared, "read_note", key="k") == ("kept", None)
    fresh = notes_task().make_env()
    fresh.reset(id="a", question="q", golden_answers=["x"])
    call(fresh, "write_note", key="k", text="gone")
    fresh.reset(id="b", question="q", golden_answers=["x"])
    assert call(fresh, "read_note", key="k")[1] == "tool_error"
    shared._sessions.for_episode(None).close()
    fresh._close()


def test_results_are_cut_at_the_limit_and_non_text_content_can_be_refused():
    env = notes_task(max_result_chars=10, non_text="refuse").make_env()
    env.reset(id="a", question="q", golden_answers=["x"])
    call(env, "write_note", key="k", text="x" * 25)
    assert call(env, "read_note", key="k") == ("x" * 10 + "\n[... 15 more characters cut]", None)
    text, kind = call(env, "picture")
    assert kind == "tool_error" and "image content" in text
    assert SPEC.score("x", {}, env)["tool_errors"] == 1.0  # the refusal counts as the tool error it is
    env._close()


def test_allow_and_deny_lists_shape_the_tools_and_a_name_the_server_lacks_is_refused():
    env = notes_task(allow=["read_note", "write-note", "fault"], deny=["fault"]).make_env()
    assert {s["function"]["name"] for s in tool_schemas(env)} == {"read_note", "write_note"}
    with pytest.raises(DataError, match="mcp.deny: nope not among the tools"):
        notes_task(deny=["nope"])
    with pytest.raises(DataError, match="exactly one server"):
        SPEC.build(SPEC.settings(), {})


def test_a_server_that_does_not_start_stops_the_command_naming_it_and_its_stderr(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "1", "question": "q", "golden_answers": ["a"]}) + "\n")
    r = cli(["eval", "--env", "mcp", "--policy", "oracle", "--name", "broken",
             "--env-arg", f"command={json.dumps(sys.executable)}",
             "--env-arg", 'args=["-c", "import sys; sys.stderr.write(\'no database configured\\\\n\'); sys.exit(4)"]',
             "--env-arg", f"tasks={json.dumps(str(tasks))}"], tmp_path, ok=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"MCP server {sys.executable} -c" in r.stderr and "no database configured" in r.stderr
    assert not (tmp_path / "runs" / "eval" / "broken" / "trajectories.jsonl").exists()


def test_a_task_file_without_an_answer_or_a_check_is_refused_with_file_and_line(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "1", "question": "q", "golden_answers": ["a"]}) + "\n"
                     + json.dumps({"id": "2", "question": "q"}) + "\n")
    with pytest.raises(DataError, match=r"tasks.jsonl:2: a task needs golden_answers or a final_check"):
        SPEC.rows("all", SPEC.settings(tasks=str(tasks)))


NOTES_TASKS = [
    {"id": "n0", "question": "What does the note under capital say?", "golden_answers": ["Paris"],
     "plan": [{"tool": "read_note", "arguments": {"key": "capital"}}]},
    {"id": "n1", "question": "Store the note blue under the key color.",
     "final_check": {"tool": "read_note", "arguments": {"key": "color"}, "expect": "blue"},
     "plan": [{"tool": "write-note", "arguments": {"key": "color", "text": "blue"}}]},
    {"id": "n2", "question": "How many notes are there?", "golden_answers": ["1"],
     "plan": [{"tool": "count", "arguments": {}}]},
    {"id": "n3", "question": "Store the note red under the key color.",
     "final_check": {"tool": "read_note", "arguments": {"key": "color"}, "expect": "red"},
     "plan": [{"tool": "write-note", "arguments": {"key": "color", "text": "red"}}]},
]


def notes_preset(tmp_path, tiny_model, secret: str = "") -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in NOTES_TASKS))
    server = (f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SERVER))}]\n'
              f'tasks = {json.dumps(str(tasks))}\nheldout = 1\nenv = {{NOTES_MODE = "test"}}\n'
              + ('env_from = {NOTES_TOKEN = "AGENTRL_TEST_SECRET"}\n' if secret else ""))
    preset = tmp_path / "mcp.toml"
    preset.write_text(
        '[eval]\nname = "mcp_oracle"\nenv = "mcp"\npolicy = "oracle"\n[eval.mcp]\n' + server +
        '[data]\nname = "mcp_data"\nmin_f1 = 0.0\nrequire_answer = true\nval_fraction = 0.0\n'
        '[grpo]\nname = "mcp_grpo"\nenv = "mcp"\nnum_generations = 2\nper_device_train_batch_size = 2\nmax_steps = 2\n'
        'max_completion_length = 64\nmax_tool_calling_iterations = 2\neval_questions = 1\n'
        'gradient_checkpointing = false\nreport_to = []\nlog_completions = false\n'
        f'[grpo.model]\nname = "{tiny_model}"\n[grpo.mcp]\n' + server +
        'rewards = {mcp_success = 1.0, format = 0.1}\n')
    return preset


@pytest.mark.slow
def test_the_python_stdio_server_goes_through_eval_curate_export_and_two_grpo_steps(tmp_path, tiny_model):
    secret = "s3cr3t-token-value"
    preset = notes_preset(tmp_path, tiny_model, secret)
    env = {"AGENTRL_TEST_SECRET": secret}
    cli(["eval", "--config", str(preset), "--split", "train"], tmp_path, env)
    run = tmp_path / "runs" / "eval" / "mcp_oracle"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["n"] == 3 and metrics["errors"] == 0 and metrics["overall"]["success"] == 1.0, metrics
    trajectories = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    write = next(t for t in trajectories if t["id"] == "n1")
    calls = [c["function"] for m in write["messages"] for c in m.get("tool_calls") or []]
    assert calls == [{"name": "write_note", "arguments": json.dumps({"key": "color", "text": "blue"})}]
    assert write["metrics"]["state"] == 1.0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["task"]["protocol"] == "2026-07-28"  # the SDK 2.x server: server/discover, stateless
    cli(["curate", str(run), "--config", str(preset)], tmp_path, env)
    cli(["export", "runs/data/mcp_data"], tmp_path, env)
    row = json.loads((tmp_path / "runs" / "data" / "mcp_data" / "trl" / "train.jsonl").read_text().splitlines()[0])
    source = next(t for t in trajectories if t["id"] == row["id"])
    assert json.loads(row["tools"]) == source["tools"]  # the tool definitions the evaluation showed, byte for byte
    cli(["grpo", "--config", str(preset)], tmp_path, env)
    grpo = json.loads((tmp_path / "runs" / "grpo" / "mcp_grpo" / "metrics.json").read_text())
    assert grpo["steps"] == 2 and grpo["reward_funcs"] == ["mcp_success", "format"]
    assert grpo["evals"][-1]["n"] == 1 and grpo["train_rows"] == 3  # n3 is held out
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".txt")]
    assert written and not [p for p in written if secret in p.read_text(errors="replace")]


@pytest.mark.slow
def test_agentrls_own_retrieval_server_over_http_is_an_environment_with_headers_from_the_environment(
        tmp_path, mcp_url, hotpot_rows):
    tasks = tmp_path / "tasks.jsonl"
    rows = hotpot_rows[:3]
    tasks.write_text("".join(json.dumps({"id": r["id"], "question": r["question"],
                                         "golden_answers": r["golden_answers"],
                                         "plan": [{"tool": "search", "arguments": {"query": r["question"]}}]}) + "\n"
                             for r in rows))
    secret, key = "bearer-value-not-to-be-written", "url-key-not-to-be-written"
    cli(["eval", "--env", "mcp", "--policy", "oracle", "--name", "served", "--split", "all",
         "--env-arg", f"url={json.dumps(mcp_url + '?key=' + key)}",  # a key in the URL: a secret too
         "--env-arg", 'headers_from={Authorization = "AGENTRL_TEST_BEARER"}',
         "--env-arg", f"tasks={json.dumps(str(tasks))}"], tmp_path, {"AGENTRL_TEST_BEARER": secret})
    run = tmp_path / "runs" / "eval" / "served"
    trajectories = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 3 and all(t["metrics"]["tool_calls"] == 1 for t in trajectories)
    tool_msgs = [m for m in trajectories[0]["messages"] if m["role"] == "tool"]
    assert tool_msgs and "error" not in tool_msgs[0]["content"].lower()[:20]
    assert [t["function"]["name"] for t in trajectories[0]["tools"]] == ["search"]
    assert not [p for p in run.rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
    assert not [p for p in run.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    assert json.loads((run / "manifest.json").read_text())["config"]["task"]["protocol"] == "2026-07-28"


@pytest.mark.slow
def test_the_npm_filesystem_server_reads_and_writes_files_and_the_final_state_is_checked(tmp_path):
    if not NPM_FS.exists() and shutil.which("npm"):  # installed here as .ci/run does: the test runs wherever npm is
        subprocess.run(["npm", "install", "--prefix", str(ROOT / "build" / "npm"), "--no-audit", "--no-fund",
                        "--silent", "@modelcontextprotocol/server-filesystem@2026.8.31"], timeout=600, check=False)
    if not NPM_FS.exists():
        # .ci/run installs it: under CI it must run
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            f"{NPM_FS} not installed: npm is missing (apt-get install nodejs npm) or the npm registry is unreachable")
    files = tmp_path / "files"
    files.mkdir()
    (files / "city.txt").write_text("Lyon\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "f0", "question": "Which city is in city.txt?", "golden_answers": ["Lyon"],
                    "plan": [{"tool": "read_text_file", "arguments": {"path": str(files / "city.txt")}}]}) + "\n"
        + json.dumps({"id": "f1", "question": "Write Nice to nice.txt.",
                      "final_check": {"tool": "read_text_file", "arguments": {"path": str(files / "nice.txt")},
                                      "expect": "Nice"},
                      "plan": [{"tool": "write_file", "arguments": {"path": str(files / "nice.txt"),
                                                                     "content": "Nice"}}]}) + "\n")
    cli(["eval", "--env", "mcp", "--policy", "oracle", "--name", "fs", "--split", "all",
         "--env-arg", f"command={json.dumps(str(NPM_FS))}", "--env-arg", f"args=[{json.dumps(str(files))}]",
         "--env-arg", 'allow=["read_text_file", "write_file"]',
         "--env-arg", f"tasks={json.dumps(str(tasks))}"], tmp_path)
    run = tmp_path / "runs" / "eval" / "fs"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["n"] == 2 and metrics["errors"] == 0 and metrics["overall"]["success"] == 1.0, metrics
    first = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["read_text_file", "write_file"]
    assert (files / "nice.txt").read_text() == "Nice"
    # the TypeScript SDK 1.x server: no server/discover, the client falls back to the 2025-11-25 handshake
    assert json.loads((run / "manifest.json").read_text())["config"]["task"]["protocol"] == "2025-11-25"
    assert shutil.which("node") is not None


def test_mcp_tasks_writes_a_task_file_from_the_tool_list_keeping_tasks_whose_two_answers_agree(tmp_path,
                                                                                             endpoint_url):
    """The scripted endpoint writes one task per tool (required strings filled with "missing") and a line that is no
    task; each task is answered twice through the agent loop with the server's tools. read_note("missing") is a tool
    error, so that task has no answer and is dropped; the others' answers agree and become their gold."""
    out = tmp_path / "tasks" / "notes.jsonl"
    r = cli(["mcp-tasks", "--env-arg", f"command={json.dumps(sys.executable)}",
             "--env-arg", f"args=[{json.dumps(str(SERVER))}]", "--base-url", endpoint_url, "--model", "scripted",
             "--n", "5", "--out", str(out)], tmp_path)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    gold = {row["question"].split(":")[1]: row["golden_answers"] for row in rows}
    assert gold == {"count": ["1"], "fault": ["no fault"], "picture": ["[image: image/png, 102 bytes]"],
                    "write_note": ["stored 7 characters under missing"]}  # the name the agent sees
    assert "5 written by scripted, 4 kept, 0 whose 2 answers disagreed, 1 without an answer, 1 unreadable" in r.stdout
    loaded = SPEC.rows("all", SPEC.settings(tasks=str(out)))  # the file reads back as the environment's task rows
    assert [(t["id"], t["question"], t["golden_answers"]) for t in loaded] == [
        (t["id"], t["question"], t["golden_answers"]) for t in rows]
    assert all(row["id"].startswith("mcp_") for row in rows)
    none = cli(["mcp-tasks", "--env-arg", f"command={json.dumps(sys.executable)}",
                "--env-arg", f"args=[{json.dumps(str(SERVER))}]", "--env-arg", 'allow=["read_note"]',
                "--base-url", endpoint_url, "--model", "scripted", "--n", "2", "--out", str(tmp_path / "none.jsonl")],
               tmp_path, ok=False)
    assert none.returncode == 1 and "nothing was written" in none.stdout and not (tmp_path / "none.jsonl").exists()
