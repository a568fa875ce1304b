"""The mcp environment against a hostile server (tests/mcp_hostile_server.py, a hand-written JSON-RPC server whose
tools a spec file sets): tool and argument names that collide with Python or with the environment's own attributes,
nested schemas, non-BMP text, huge descriptions, secrets echoed back or printed at a failed start. Each goes through
the real entry points (``agentrl eval``, the GRPO trainer's own prompt rendering) and is checked in what they write."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from test_mcp_env import cli

SERVER = ROOT / "tests" / "mcp_hostile_server.py"

# names that are Python's or the environment's own (its methods, attributes and the receiver), or no identifier
HOSTILE_NAMES = ["__init__", "_call", "_close", "calls", "transcript", "tool_errors", "3d-render", "@", "reset",
                 "get_reward", "class"]
ARGS = {"type": "object", "properties": {"self": {"type": "string"}, "a-b": {"type": "integer"},
                                         "class": {"type": "boolean"}}, "required": ["self"]}
EDIT = {"type": "object", "required": ["path", "edits"], "properties": {
    "path": {"type": "string", "description": "the file 📄"},
    "edits": {"type": "array", "description": "the edits, in order", "items": {
        "type": "object", "required": ["oldText", "newText"],
        "properties": {"oldText": {"type": "string", "description": "text to find"},
                       "newText": {"type": "string", "description": "text to put there"}}}},
    "mode": {"type": "string", "enum": ["strict", "loose"], "description": "how to match"},
    "anything": True}}


def spec_file(tmp_path, tools, **extra):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"tools": tools, **extra}, ensure_ascii=False), encoding="utf-8")
    return path


def tasks_file(tmp_path, tasks):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")
    return path


def eval_hostile(tmp_path, spec, tasks, name="hostile", ok=True, env=None, extra=()):
    return cli(["eval", "--env", "mcp", "--policy", "oracle", "--name", name, "--split", "all",
                "--env-arg", f"command={json.dumps(sys.executable)}",
                "--env-arg", f"args=[{json.dumps(str(SERVER))}, {json.dumps(str(spec))}]",
                "--env-arg", f"tasks={json.dumps(str(tasks))}", *extra], tmp_path, env, ok=ok, timeout=300)


def trajectories(tmp_path, name="hostile"):
    path = tmp_path / "runs" / "eval" / name / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def servers_alive(spec) -> list[str]:
    """Return the command lines of the processes naming ``spec``: its servers and their children."""
    found = subprocess.run(["pgrep", "-af", str(spec)], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if "pgrep" not in line]


@pytest.fixture
def hostile_run(tmp_path):
    spec = spec_file(tmp_path, [{"name": n, "description": f"the tool {n}", "inputSchema": ARGS}
                                for n in HOSTILE_NAMES])
    arguments = {"self": "me", "a-b": 2, "class": True}
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"Call {n}.", "golden_answers": ["done"],
                                   "plan": [{"tool": n, "arguments": arguments}]}
                                  for i, n in enumerate(HOSTILE_NAMES)])
    eval_hostile(tmp_path, spec, tasks)
    return spec, arguments


def test_hostile_tool_names_are_all_offered_called_under_the_servers_names_and_leave_no_server(tmp_path,
                                                                                              hostile_run):
    """Names that were Python's (``__init__``, ``class``), the environment's own (``_call``, ``_close``, ``calls``,
    ``reset``, ...) or no identifier (``3d-render``, ``@``): every one is offered, called under the server's name
    with the server's argument names (the oracle's plan uses them), and the environment still counts and closes."""
    spec, arguments = hostile_run
    done = trajectories(tmp_path)
    assert len(done) == len(HOSTILE_NAMES)
    offered = sorted(t["function"]["name"] for t in done[0]["tools"])
    assert offered == sorted(["init", "call", "close", "calls", "transcript", "tool_errors", "tool_3d_render",
                              "tool", "reset_", "get_reward_", "class_"])
    for trajectory, name in zip(sorted(done, key=lambda t: int(t["id"][1:])), HOSTILE_NAMES, strict=True):
        results = [m["content"] for m in trajectory["messages"] if m["role"] == "tool"]
        assert results == [json.dumps({"arguments": arguments, "tool": name}, sort_keys=True)], name
        assert trajectory["metrics"]["tool_errors"] == 0 and trajectory["metrics"]["tool_calls"] == 1, name
    params = done[0]["tools"][0]["function"]["parameters"]
    assert sorted(params["properties"]) == ["a_b", "class_", "self_"] and params["required"] == ["self_"]
    assert servers_alive(spec) == []  # "_close" did not replace the environment's own close
    manifest = json.loads((tmp_path / "runs" / "eval" / "hostile" / "manifest.json").read_text())
    assert manifest["config"]["task"]["protocol"] == "2025-11-25"  # "server/discover" unknown: the handshake


@pytest.mark.parametrize("tools, named", [
    ([{"name": "a-b", "inputSchema": {"type": "object"}}, {"name": "a_b", "inputSchema": {"type": "object"}}],
     "MCP tools 'a-b' and 'a_b' both become the tool name 'a_b'"),
    ([{"name": "t", "inputSchema": {"type": "object", "properties": {"a_b_": {"type": "string"},
                                                                      "a-b": {"type": "string"}}}}],
     "MCP tool 't': its arguments 'a_b_' and 'a-b' both become 'a_b'"),
])
def test_two_names_that_become_one_stop_the_run_naming_both(tmp_path, tools, named):
    spec = spec_file(tmp_path, tools)
    tasks = tasks_file(tmp_path, [{"id": "t", "question": "q", "golden_answers": ["x"]}])
    r = eval_hostile(tmp_path, spec, tasks, ok=False)
    assert r.returncode == 2 and named in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "runs" / "eval" / "hostile" / "trajectories.jsonl").exists()


def test_the_model_sees_the_servers_schema_in_evaluation_and_in_grpos_own_rendering(tmp_path, tiny_model):
    """Array items, nested objects, enums, a boolean subschema and non-BMP text reach the tool definitions the
    evaluation records (and the SFT export copies) as ``tools/list`` gave them; TRL's GRPO renders the same
    definitions token for token; a 200,000-character description is cut, with a line saying so."""
    from agentrl.train.configs import GRPOSettings, trl_args
    from agentrl.train.grpo import build_task, derived_args, make_trainer
    from agentrl.train.models import load_for_training

    tools = [{"name": "edit_file", "description": "Edit a file 🔍 in place.", "inputSchema": EDIT},
             {"name": "huge", "description": "x" * 200_000, "inputSchema": {"type": "object"}}]
    spec = spec_file(tmp_path, tools)
    tasks = tasks_file(tmp_path, [{"id": "t", "question": "Edit it.", "golden_answers": ["done"], "plan": [
        {"tool": "edit_file", "arguments": {"path": "a.txt", "edits": [{"oldText": "é", "newText": "😀"}]}}]}])
    r = eval_hostile(tmp_path, spec, tasks)
    assert "descriptions cut at 2,000 characters (max_description_chars) in the tools huge" in r.stdout
    [done] = trajectories(tmp_path)
    shown = {t["function"]["name"]: t["function"] for t in done["tools"]}
    assert shown["edit_file"]["description"] == "Edit a file 🔍 in place."
    assert shown["edit_file"]["parameters"] == {**EDIT, "properties": {**EDIT["properties"], "anything": {}}}
    assert len(shown["huge"]["description"]) < 2100 and "198,000 more characters cut" in shown["huge"]["description"]
    sent = json.loads(next(m["content"] for m in done["messages"] if m["role"] == "tool"))
    assert sent["arguments"]["edits"] == [{"oldText": "é", "newText": "😀"}]

    settings = {"command": sys.executable, "args": [str(SERVER), str(spec)], "tasks": str(tasks)}
    cfg = GRPOSettings.of(name="schema", env="mcp", model={"name": str(tiny_model)}, num_generations=2,
                          per_device_train_batch_size=2, max_steps=1, eval_questions=0, report_to=[],
                          log_completions=False, gradient_checkpointing=False, mcp=settings)
    loaded = load_for_training(cfg.model)
    task = build_task(cfg, {})
    trainer = make_trainer(cfg, trl_args(cfg, derived_args(cfg, loaded.backend, tmp_path)), loaded, task,
                           [{"prompt": [{"role": "user", "content": "q"}]}])
    trainer._batch_environments = [None]
    prompt = [{"role": "user", "content": "Edit it."}]
    rendered = trainer._tokenize_prompts([prompt])[0][0]
    expected = loaded.tokenizer.apply_chat_template(prompt, tools=done["tools"], chat_template=trainer.chat_template,
                                                    add_generation_prompt=True, tokenize=True, return_dict=True)
    assert list(rendered) == list(expected["input_ids"])
    assert "oldText" in loaded.tokenizer.decode(rendered) and "🔍" in loaded.tokenizer.decode(rendered)


def test_secrets_the_server_echoes_or_prints_at_a_failed_start_never_reach_a_trajectory(tmp_path):
    """The value given through env_from comes back in a result and in an isError answer (a server echoing its
    environment), then in the stderr a server quotes when it fails to start mid-run: what the model reads and every
    file the run writes say [redacted:AGENTRL_TEST_TOKEN]."""
    secret = "zq9-4f1c-very-secret"
    leak = {"name": "leak", "inputSchema": {"type": "object", "properties": {"variable": {"type": "string"},
                                                                               "error": {"type": "boolean"}}}}
    tasks = tasks_file(tmp_path, [
        {"id": "a", "question": "What is it?", "golden_answers": ["x"],
         "plan": [{"tool": "leak", "arguments": {"variable": "TOKEN"}}]},
        {"id": "b", "question": "And now?", "golden_answers": ["x"],
         "plan": [{"tool": "leak", "arguments": {"variable": "TOKEN", "error": True}}]}])
    spec = spec_file(tmp_path, [leak])
    env = {"AGENTRL_TEST_TOKEN": secret}
    from_env = ("--env-arg", 'env_from={TOKEN = "AGENTRL_TEST_TOKEN"}')
    eval_hostile(tmp_path, spec, tasks, name="echo", env=env, extra=from_env)
    echoed = [m["content"] for t in trajectories(tmp_path, "echo") for m in t["messages"] if m["role"] == "tool"]
    assert echoed == ["the value is [redacted:AGENTRL_TEST_TOKEN]"] * 2

    failing = spec_file(tmp_path, [leak], stderr="auth failed for token $TOKEN", exit=1, exit_from_start=2,
                        starts_file=str(tmp_path / "starts"))
    eval_hostile(tmp_path, failing, tasks, name="failed", env=env, extra=from_env)
    quoted = [m["content"] for t in trajectories(tmp_path, "failed") for m in t["messages"] if m["role"] == "tool"]
    assert len(quoted) == 2 and all("auth failed for token [redacted:AGENTRL_TEST_TOKEN]" in q for q in quoted), quoted
    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret in p.read_text(errors="replace")]


@pytest.mark.parametrize("session", ["episode", "shared"])
def test_no_server_or_child_of_one_outlives_an_evaluation(tmp_path, session):
    """A server that exits on EOF leaving a child behind, per episode or shared by the run: after ``agentrl eval``
    nothing started for it is alive."""
    spec = spec_file(tmp_path, [{"name": "ping_me", "inputSchema": {"type": "object"}}], child=True)
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["x"],
                                   "plan": [{"tool": "ping_me"}]} for i in range(3)])
    eval_hostile(tmp_path, spec, tasks, extra=("--env-arg", f'session="{session}"'))
    assert len(trajectories(tmp_path)) == 3
    assert servers_alive(spec) == []


@pytest.mark.slow
def test_no_server_outlives_a_grpo_run(tmp_path, tiny_model):
    """TRL keeps the environments environment_factory made and never closes them: agentrl's GRPO closes each one, so
    after a GRPO step on a server that leaves a child behind, nothing started for it is alive."""
    spec = spec_file(tmp_path, [{"name": "ping_me", "inputSchema": {"type": "object"}},
                                {"name": "counter", "inputSchema": {"type": "object"}}], child=True)
    check = {"tool": "counter", "arguments": {}, "expect": "1"}  # a check that counts its calls: once per episode
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"q{i}", "final_check": check} for i in range(5)])
    server = (f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SERVER))}, {json.dumps(str(spec))}]\n'
              f'tasks = {json.dumps(str(tasks))}\nheldout = 1\nrewards = {{mcp_success = 1.0, format = 0.1}}\n')
    preset = tmp_path / "grpo.toml"
    preset.write_text(
        '[grpo]\nname = "hostile_grpo"\nenv = "mcp"\nnum_generations = 2\nper_device_train_batch_size = 2\n'
        'max_steps = 1\nmax_completion_length = 32\nmax_tool_calling_iterations = 1\neval_questions = 0\n'
        'gradient_checkpointing = false\nreport_to = []\nlog_completions = false\n'
        f'[grpo.model]\nname = "{tiny_model}"\n[grpo.mcp]\n' + server)
    cli(["grpo", "--config", str(preset)], tmp_path)
    assert json.loads((tmp_path / "runs" / "grpo" / "hostile_grpo" / "metrics.json").read_text())["steps"] == 1
    assert servers_alive(spec) == []
    logged = [json.loads(line) for line in (tmp_path / "runs" / "grpo" / "hostile_grpo" / "log.jsonl").open()]
    step = next(r for r in logged if "mcp/success" in r)
    # the reward read the check's first answer ("1") and so did the logged success: one call per episode
    assert step["mcp/success"] == 1.0 and step["rewards/mcp_success/mean"] == 1.0, step


@pytest.fixture
def html_500_url():
    """A URL whose every answer is an HTML page with status 500 (a proxy in front of a broken server)."""
    import http.server
    import threading

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><body>Internal Server Error: database down</body></html>")

        do_GET = do_DELETE = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/mcp"
    server.shutdown()


@pytest.mark.parametrize("fault, said", [
    ("refused", "did not start: ConnectError: All connection attempts failed"),
    ("html_500", "did not start: HTTP 500 from http://127.0.0.1:"),
    ("crash", "did not start: MCPError: Connection closed; its stderr ended with:\n  bad config in [redacted:"),
    ("hang_start", "did not start: no answer within 2 s"),
    ("hang_list", "tools/list: no answer from the MCP server within 2 s"),
])
def test_a_server_that_cannot_serve_stops_the_command_with_exit_2_saying_why(tmp_path, html_500_url, fault, said):
    tasks = tasks_file(tmp_path, [{"id": "t", "question": "q", "golden_answers": ["x"]}])
    tools = [{"name": "t", "inputSchema": {"type": "object"}}]
    base = ["eval", "--env", "mcp", "--policy", "oracle", "--name", "fault", "--split", "all",
            "--env-arg", f"tasks={json.dumps(str(tasks))}", "--env-arg", "startup_timeout=2",
            "--env-arg", "call_timeout=2"]
    modes = {"crash": {"stderr": "bad config in $TOKEN", "exit": 3}, "hang_start": {"hang": "start"},
             "hang_list": {"hang": "list"}}
    spec = spec_file(tmp_path, tools, **modes[fault]) if fault in modes else None
    if spec is None:
        url = "http://127.0.0.1:9/mcp" if fault == "refused" else html_500_url
        server = ["--env-arg", f"url={json.dumps(url)}"]
    else:
        server = ["--env-arg", f"command={json.dumps(sys.executable)}",
                  "--env-arg", f"args=[{json.dumps(str(SERVER))}, {json.dumps(str(spec))}]",
                  "--env-arg", 'env_from={TOKEN = "AGENTRL_TEST_TOKEN"}']
    r = cli(base + server, tmp_path, {"AGENTRL_TEST_TOKEN": "tok-123456"}, ok=False, timeout=120)
    assert r.returncode == 2 and said in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "tok-123456" not in r.stderr
    if fault == "html_500":
        assert "Internal Server Error: database down" in r.stderr
    if spec is not None:
        assert servers_alive(spec) == []


def test_a_server_that_dies_for_good_mid_run_stops_the_evaluation_with_exit_2_naming_the_cause(tmp_path):
    """It lists its tools, then never starts again: the first episodes read the failure as a tool error, the third
    failed start in a row ends the run (exit 2) with the server's own words."""
    tools = [{"name": "ping_me", "inputSchema": {"type": "object"}}]
    spec = spec_file(tmp_path, tools, stderr="license expired", exit=1, exit_from_start=2,
                     starts_file=str(tmp_path / "starts"))
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["x"],
                                   "plan": [{"tool": "ping_me"}]} for i in range(6)])
    r = eval_hostile(tmp_path, spec, tasks, ok=False, extra=("--concurrency", "1"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "the environment stopped the run" in r.stderr and "license expired" in r.stderr
    assert "3 starts in a row failed" in r.stderr
    assert len(trajectories(tmp_path)) == 2  # the two episodes before the third failure, recorded


def test_an_item_timeout_shorter_than_the_call_timeout_interrupts_the_call_and_leaves_nothing_behind(tmp_path):
    """A call the server never answers, an item timeout of 2 s against a call timeout of 30 s: the item is recorded
    as a timeout, the waiting call is interrupted (no 'Task exception was never retrieved' at exit), no server is
    left."""
    spec = spec_file(tmp_path, [{"name": "slow", "inputSchema": {"type": "object"}}], hang="call")
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["x"],
                                   "plan": [{"tool": "slow"}]} for i in range(2)])
    r = eval_hostile(tmp_path, spec, tasks, ok=False, extra=("--timeout", "2", "--env-arg", "call_timeout=30"))
    assert r.returncode == 1 and "2 of 2 items failed: timeout 2" in r.stderr  # failed items: exit 1, as always
    done = trajectories(tmp_path)
    assert len(done) == 2 and all(t.get("error") for t in done)
    assert "never retrieved" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert servers_alive(spec) == []


@pytest.mark.parametrize("reset", [False, True])
def test_state_a_shared_session_keeps_is_cleared_by_the_servers_reset_tool_at_each_episode(tmp_path, reset):
    """One server for the run (session = "shared"): without reset_tool each episode reads what the previous left
    (the counter goes 1, 2, 3); with reset_tool = "zero" every episode starts from the server's reset state. Tasks with
    a final-state check and tasks without: ``state`` is averaged over those that have one."""
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("counter", "zero")]
    spec = spec_file(tmp_path, tools)
    check = {"tool": "counter", "arguments": {}, "expect": "2"}  # the episode's own call, then the check's
    tasks = tasks_file(tmp_path, [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["x"],
                                   "plan": [{"tool": "counter"}], **({"final_check": check} if i < 2 else {})}
                                  for i in range(3)])
    extra = ("--concurrency", "1", "--env-arg", 'session="shared"', "--env-arg", 'deny=["zero"]',
             *(("--env-arg", 'reset_tool="zero"') if reset else ()))
    eval_hostile(tmp_path, spec, tasks, extra=extra)
    done = sorted(trajectories(tmp_path), key=lambda t: t["id"])
    counts = [json.loads(m["content"]) if m["content"].isdigit() else m["content"]
              for t in done for m in t["messages"] if m["role"] == "tool"]
    assert counts == ([1, 1, 1] if reset else [1, 3, 5])  # without a reset, each check counts too
    metrics = json.loads((tmp_path / "runs" / "eval" / "hostile" / "metrics.json").read_text())
    assert metrics["overall"]["state"] == (1.0 if reset else 0.5)  # over the two tasks with a check, not three
    assert [t["function"]["name"] for t in done[0]["tools"]] == ["counter"]  # the reset tool is not the model's


def test_a_reset_tool_the_server_does_not_list_is_refused_before_any_episode(tmp_path):
    spec = spec_file(tmp_path, [{"name": "counter", "inputSchema": {"type": "object"}}])
    tasks = tasks_file(tmp_path, [{"id": "t", "question": "q", "golden_answers": ["x"]}])
    r = eval_hostile(tmp_path, spec, tasks, ok=False, extra=("--env-arg", 'reset_tool="zer0"'))
    assert r.returncode == 2 and "mcp.reset_tool: 'zer0' is not among the tools" in r.stderr

