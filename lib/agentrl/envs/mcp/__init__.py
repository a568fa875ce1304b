"""mcp: any MCP server's tools as an environment (a stdio command or a streamable-HTTP URL), tasks from a JSONL file
scored on the answer and, optionally, on the server's state after the episode (README.md beside this file)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal

from agentrl.core.config import data_file
from agentrl.core.io import DataError, read_jsonl
from agentrl.core.validate import AtLeast0, AtLeast1, ExistingFile, Positive
from agentrl.envs import registry
from agentrl.envs.mcp.connection import Connection, Server, resolve_cwd
from agentrl.envs.mcp.env import Sessions, env_class, mcp_score, oracle_plan
from agentrl.envs.registry import Environment
from agentrl.envs.task import EnvSettings, Task

MAX_CALLS = 10

PROMPTS = {
    "mcp": (
        "You are an agent with tools. Use them to find what the task needs (at most {max_calls} calls), then reply "
        "with the answer only inside <answer></answer> tags; for a task that asks you to change something, do it, "
        "then reply <answer>done</answer>."
    ),
}


@dataclass
class MCPSettings(EnvSettings):
    """The MCP environment's settings ([eval.mcp], [grpo.mcp]): the server, its tools, the limits of a call, the
    task file and its splits."""

    command: str | None = None  # a stdio server: the command (e.g. "npx" or a path), with args, env, cwd
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # environment of the server process (not secrets: env_from)
    env_from: dict[str, str] = field(default_factory=dict)  # server variable -> a variable of this process (secrets)
    cwd: str | None = None  # the server process's working directory
    url: str | None = None  # a streamable-HTTP server instead (e.g. http://127.0.0.1:8765/mcp)
    url_from: str | None = None  # or a variable of this process holding the URL (one with a key in it)
    headers_from: dict[str, str] = field(default_factory=dict)  # HTTP header -> a variable of this process (tokens)
    allow: list[str] | None = None  # the tools offered to the model (None: every tool the server lists)
    deny: list[str] = field(default_factory=list)  # tools never offered
    session: Literal["episode", "shared"] = "episode"  # a server session per episode, or one for the whole run
    reset_tool: str | None = None  # a server tool called at each episode's start (state a session does not reset)
    reset_arguments: dict = field(default_factory=dict)  # its arguments
    call_timeout: Positive = 30.0  # seconds a tool call may take; past it the call is a tool error, session replaced
    startup_timeout: Positive = 60.0  # seconds the server may take to start and answer initialize
    max_result_chars: AtLeast1 = 4000  # a tool result is cut here (the model reads how much was left out)
    max_description_chars: AtLeast1 = 2000  # a tool's or an argument's description is cut here (one line says so)
    non_text: Literal["placeholder", "refuse"] = "placeholder"  # image/audio/resource content: a stand-in or an error
    tasks: ExistingFile | None = None  # JSONL task file: id, question, golden_answers and/or final_check, plan
    train: AtLeast1 | None = None  # training tasks, from the first (None: all but the validation and held-out ones)
    validation: AtLeast0 = 0  # the tasks before the held-out ones: hyperparameters are chosen on them
    heldout: AtLeast0 | None = None  # the last tasks of the file, evaluation only (None: a fifth, at least one)


def server_of(settings: MCPSettings) -> Server:
    """Return the server the settings name (DataError unless exactly one of command and url is set)."""
    if sum(map(bool, (settings.command, settings.url, settings.url_from))) != 1:
        raise DataError("the mcp environment needs exactly one server: command = \"...\" (stdio, with args), "
                        "url = \"http://.../mcp\" or url_from = \"VARIABLE\" (streamable HTTP) in [eval.mcp] / "
                        "[grpo.mcp] (or --env-arg)")
    return Server(command=settings.command, args=tuple(settings.args), env=dict(settings.env),
                  env_from=dict(settings.env_from), cwd=resolve_cwd(settings.cwd), url=settings.url,
                  headers_from=dict(settings.headers_from), url_from=settings.url_from)


def offered(tools: list, settings: MCPSettings, where: str) -> list:
    """Return the tools the model is offered: ``allow`` (every listed tool when None) less ``deny``; DataError for
    a name the server does not list or when nothing is left."""
    names = [t.name for t in tools]
    for key, wanted in (("allow", settings.allow or []), ("deny", settings.deny)):
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise DataError(f"mcp.{key}: {', '.join(unknown)} not among the tools {where} lists: {', '.join(names)}")
    kept = [t for t in tools if (settings.allow is None or t.name in settings.allow) and t.name not in settings.deny]
    if not kept:
        raise DataError(f"mcp: no tool left to offer from {where} (allow {settings.allow}, deny {settings.deny})")
    return kept


_LISTED: dict[str, tuple[tuple, str | None, str | None]] = {}


def _listed(server: Server, startup_timeout: float, call_timeout: float) -> tuple[tuple, str | None, str | None]:
    """Return the server's tools, its instructions and the protocol revision negotiated."""
    # tools/list once per server and process: every Task built for it (eval, GRPO, its held-out evaluation) shares it
    key = json.dumps(dataclasses.asdict(server), sort_keys=True, default=str)
    if key not in _LISTED:
        connection = Connection(server, call_timeout=call_timeout, startup_timeout=startup_timeout).open()
        try:
            _LISTED[key] = tuple(connection.list_tools()), connection.instructions, connection.protocol
        except (TimeoutError, ConnectionError) as exc:  # a server that hangs or dies on tools/list: said, not traced
            raise DataError(server.redact(f"MCP server {server.describe()}: {exc}")) from None
        finally:
            connection.close()
    return _LISTED[key]


def build(settings: MCPSettings, preset: dict | None = None):
    """Return the Task over the server's tools (listed once when the Task is built: a server that does not start
    is a DataError naming its command)."""
    server = server_of(settings)
    tools, instructions, protocol = _listed(server, settings.startup_timeout, settings.call_timeout)
    kept = offered(list(tools), settings, server.describe())
    if settings.reset_tool is not None and settings.reset_tool not in [t.name for t in tools]:
        raise DataError(f"mcp.reset_tool: {settings.reset_tool!r} is not among the tools {server.describe()} lists: "
                        f"{', '.join(t.name for t in tools)}")
    max_calls = MAX_CALLS if settings.max_tool_calls is None else settings.max_tool_calls
    sessions = Sessions(server, per_episode=settings.session == "episode", call_timeout=settings.call_timeout,
                        startup_timeout=settings.startup_timeout)
    cls = env_class(kept, max_description_chars=settings.max_description_chars)
    cls._sessions, cls._max_calls = sessions, max_calls
    cls._max_chars, cls._non_text = settings.max_result_chars, settings.non_text
    cls._reset_call = (settings.reset_tool, dict(settings.reset_arguments)) if settings.reset_tool else None
    system = registry.prompt(ENVIRONMENT, settings.prompt or "mcp", max_calls=max_calls)
    if instructions:
        system = f"{system}\n\n{instructions.strip()}"
    return Task(name=ENVIRONMENT.name, make_env=cls, system_prompt=system, oracle_plan=oracle_plan, score=mcp_score,
                max_turns=settings.max_turns or ENVIRONMENT.max_turns,
                config={"server": server.describe(), "protocol": protocol,
                        "tools": sorted(n for n in vars(cls) if not n.startswith("_")),
                        "session": settings.session, "reset_tool": settings.reset_tool, "max_calls": max_calls,
                        "call_timeout": settings.call_timeout,
                        "max_result_chars": settings.max_result_chars,
                        "max_description_chars": settings.max_description_chars, "non_text": settings.non_text})


def load_tasks(path: str) -> list[dict]:
    """Return the task rows of a JSONL file: ``id``, ``question`` and ``golden_answers`` and/or ``final_check``
    (``{"tool", "arguments", "expect"}``); ``plan`` (the oracle's calls) optional. DataError with file:line
    otherwise."""
    rows = read_jsonl(data_file(path), required=("id", "question"))
    for i, row in enumerate(rows, start=1):
        check = row.get("final_check")
        if not row.get("golden_answers") and not check:
            raise DataError(f"{path}:{i}: a task needs golden_answers or a final_check")
        if check is not None and not (isinstance(check, dict) and check.get("tool") and "expect" in check):
            raise DataError(f"{path}:{i}: final_check must be {{\"tool\": ..., \"arguments\": {{...}}, "
                            "\"expect\": ...}")
        for step in row.get("plan") or []:
            if not isinstance(step, dict) or not step.get("tool"):
                raise DataError(f"{path}:{i}: plan steps are {{\"tool\": ..., \"arguments\": {{...}}}}")
        # the check and the plan travel as metadata: GRPO's dataset hands the environment only id, question,
        # golden_answers and the metadata (agentrl.envs.base.row_metadata)
        extra = {k: row[k] for k in ("final_check", "plan") if row.get(k) is not None}
        row["metadata"] = {**(row.get("metadata") or {}), **extra}
        row["golden_answers"] = row.get("golden_answers") or []
    return rows


def rows(split: str, settings: MCPSettings, preset: dict | None = None, source: str | None = None) -> list[dict]:
    """Return the task file's rows of ``split``: ``heldout`` the last ``heldout`` tasks, ``validation`` the
    ``validation`` before them, ``train`` the rest (the first ``train`` of them when set), ``all`` every row.
    Without a task file ``heldout`` and ``validation`` are empty, the others a DataError."""
    path = source or settings.tasks
    if not path and split in ("heldout", "validation"):
        return []  # no task file, no tasks: nothing to hold out (the preset-wide held-out set asks every env)
    if not path:
        raise DataError("the mcp environment has no task file: set tasks = \"path/to/tasks.jsonl\" in [eval.mcp] / "
                        "[grpo.mcp], or pass --qa")
    found = load_tasks(path)
    n = len(found)
    held = min(heldout_size(settings, n), n)
    val = min(max(0, settings.validation), n - held)
    cut = {"heldout": (n - held, n), "validation": (n - held - val, n - held), "all": (0, n),
           "train": (0, n - held - val if settings.train is None else min(settings.train, n - held - val))}[split]
    return found[cut[0]:cut[1]]


def heldout_size(settings: MCPSettings, n: int) -> int:
    """Return how many of ``n`` tasks are held out: ``heldout``, else a fifth of them (at least one when there are
    two or more: a task file always keeps tasks to report on that no training path reads)."""
    if settings.heldout is not None:
        return settings.heldout
    return max(1, n // 5) if n >= 2 else 0


def score(prediction, row, env) -> dict:
    """Return the episode's metrics (agentrl.envs.mcp.env.mcp_score)."""
    return mcp_score(prediction, row, env)


ENVIRONMENT = Environment(
    name="mcp", summary="any MCP server's tools (stdio or streamable HTTP), tasks from a JSONL file", build=build,
    rows=rows, settings=MCPSettings, env_class="agentrl.envs.mcp.env:MCPEnv", score=score, prompts=PROMPTS,
    rewards={"answer_f1": 1.0, "format": 0.1}, reward_metrics={"mcp_success": "success"}, success="success",
    metrics=("f1", "tool_errors"), folder=__name__)
