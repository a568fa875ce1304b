"""The mcp environment against published MCP servers, as users run them: the npm memory and everything servers
(TypeScript SDK 1.x: no ``server/discover``, the client falls back to the 2025-11-25 handshake) and PyPI's
mcp-server-time (Python SDK 2.x: the stateless 2026-07-28 revision). Installed by .ci/run (build/npm, build/mcp-time);
under CI=true a missing server fails the test, elsewhere it is skipped with the command that installs it."""

import json
import os

import pytest

from conftest import ROOT
from test_mcp_env import cli

BIN = ROOT / "build" / "npm" / "node_modules" / ".bin"
TIME = ROOT / "build" / "mcp-time" / "bin" / "mcp-server-time"


def installed(path):
    """Return ``path`` when the server is installed; otherwise fail under CI (it installs them) or skip."""
    if not path.exists():
        why = f"{path} not installed (.ci/run installs the npm servers into build/npm and mcp-server-time into " \
              "build/mcp-time)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return str(path)


def run_eval(tmp_path, name, command, tasks, *extra, env=None):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")
    cli(["eval", "--env", "mcp", "--policy", "oracle", "--name", name, "--split", "all",
         "--env-arg", f"command={json.dumps(command)}", "--env-arg", f"tasks={json.dumps(str(path))}", *extra],
        tmp_path, env)
    run = tmp_path / "runs" / "eval" / name
    done = [json.loads(line) for line in (run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()]
    return done, json.loads((run / "manifest.json").read_text())


def tool_results(trajectory) -> list[str]:
    return [m["content"] for m in trajectory["messages"] if m["role"] == "tool"]


@pytest.mark.slow
def test_the_npm_memory_server_takes_nested_arguments_and_keeps_its_graph_within_an_episode(tmp_path):
    entity = {"name": "Lyon", "entityType": "city", "observations": ["on the Rhône", "3rd largest in France"]}
    done, manifest = run_eval(tmp_path, "memory", installed(BIN / "mcp-server-memory"), [
        {"id": "m0", "question": "Remember Lyon, then read the graph.", "golden_answers": ["done"],
         "plan": [{"tool": "create_entities", "arguments": {"entities": [entity]}}, {"tool": "read_graph"}]}],
        "--env-arg", f"env={{MEMORY_FILE_PATH = {json.dumps(str(tmp_path / 'memory.jsonl'))}}}")
    [trajectory] = done
    created, graph = tool_results(trajectory)
    assert trajectory["metrics"]["tool_errors"] == 0 and "Rhône" in graph and '"Lyon"' in graph, (created, graph)
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in trajectory["tools"]}["create_entities"]
    item = schema["properties"]["entities"]["items"]  # the nested shape the model must fill, as the server gave it
    assert item["type"] == "object" and set(item["required"]) >= {"name", "entityType", "observations"}
    assert item["properties"]["observations"] == {"type": "array", "items": {"type": "string"},
                                                  "description": item["properties"]["observations"]["description"]}
    assert manifest["config"]["task"]["protocol"] == "2025-11-25"


@pytest.mark.slow
def test_the_npm_everything_server_echoes_non_bmp_text_and_its_environment_dump_is_redacted(tmp_path):
    secret = "sk-everything-3f9a1c"
    done, manifest = run_eval(tmp_path, "everything", installed(BIN / "mcp-server-everything"), [
        {"id": "e0", "question": "Echo it.", "golden_answers": ["done"],
         "plan": [{"tool": "echo", "arguments": {"message": "hi 🔍 ñ"}}]},
        {"id": "e1", "question": "Add 2 and 3.", "golden_answers": ["5"],
         "plan": [{"tool": "get_sum", "arguments": {"a": 2, "b": 3}}]},
        {"id": "e2", "question": "What is your environment?", "golden_answers": ["done"],
         "plan": [{"tool": "get_env"}]}],
        "--env-arg", 'env_from={API_TOKEN = "AGENTRL_TEST_EVERYTHING"}', env={"AGENTRL_TEST_EVERYTHING": secret})
    by_id = {t["id"]: tool_results(t) for t in done}
    assert "hi 🔍 ñ" in by_id["e0"][0] and "5" in by_id["e1"][0]
    assert "API_TOKEN" in by_id["e2"][0] and "[redacted:AGENTRL_TEST_EVERYTHING]" in by_id["e2"][0]
    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert not [p for p in written if secret in p.read_text(errors="replace")]
    assert manifest["config"]["task"]["protocol"] == "2025-11-25"


@pytest.mark.slow
def test_pypis_time_server_speaks_the_stateless_revision(tmp_path):
    done, manifest = run_eval(tmp_path, "time", installed(TIME), [
        {"id": "t0", "question": "What time is it in UTC?", "golden_answers": ["done"],
         "plan": [{"tool": "get_current_time", "arguments": {"timezone": "UTC"}}]}],
        "--env-arg", 'args=["--local-timezone", "UTC"]')
    [result] = tool_results(done[0])
    assert json.loads(result)["timezone"] == "UTC" and done[0]["metrics"]["tool_errors"] == 0
    assert manifest["config"]["task"]["protocol"] == "2026-07-28"


@pytest.mark.slow
def test_two_grpo_steps_of_the_tiny_model_against_the_npm_everything_server(tmp_path, tiny_model):
    command = installed(BIN / "mcp-server-everything")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"s{i}", "question": f"What is {i} plus {i + 1}?",
                                         "golden_answers": [str(2 * i + 1)],
                                         "plan": [{"tool": "get_sum", "arguments": {"a": i, "b": i + 1}}]}) + "\n"
                             for i in range(6)))
    preset = tmp_path / "everything.toml"
    preset.write_text(
        '[grpo]\nname = "everything_grpo"\nenv = "mcp"\nnum_generations = 2\nper_device_train_batch_size = 2\n'
        'max_steps = 2\nmax_completion_length = 48\nmax_tool_calling_iterations = 2\neval_questions = 1\n'
        'gradient_checkpointing = false\nreport_to = []\nlog_completions = false\n'
        f'[grpo.model]\nname = "{tiny_model}"\n[grpo.mcp]\ncommand = {json.dumps(command)}\n'
        f'tasks = {json.dumps(str(tasks))}\nheldout = 1\nallow = ["get-sum", "echo"]\n')
    cli(["grpo", "--config", str(preset)], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "grpo" / "everything_grpo" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["evals"][-1]["n"] == 1
