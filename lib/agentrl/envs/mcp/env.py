"""The MCP environment's episode: an environment class made from a server's ``tools/list``, one method per tool.

:func:`env_class` writes each tool as a Python method with the input schema's arguments, types and descriptions
(Google-style docstring), so ``transformers.utils.get_json_schema`` renders the same tool definition for the
evaluation's agent loop, the SFT export and TRL's ``environment_factory`` (agentrl.envs.base's one rule). A tool or
argument name that is not a Python identifier is written as one (``list-files`` -> ``list_files``) and the call goes
out under the server's own name. Schema types map to ``str``, ``int``, ``float``, ``bool``, ``list`` and ``dict``;
an argument the schema does not require defaults to None and is left out of the call.

Each call is bounded (:class:`agentrl.envs.mcp.connection.Connection`); a result is its text content, cut at
``max_result_chars``; an image, audio or resource content becomes a short stand-in (``[image: image/png, 12,345
bytes]``) or, with ``non_text = "refuse"``, a tool error. A server that answers ``isError``, crashes or hangs gives
the model a tool error for that call; a crashed or hung server is replaced for the next episode, never the run.
"""

from __future__ import annotations

import json
import keyword
import re
import threading
from typing import Any

from agentrl.core.chat import Turn
from agentrl.core.io import DataError
from agentrl.core.metrics import answer_metrics, gold_list, normalize_answer
from agentrl.envs.base import ToolError, row_metadata
from agentrl.envs.mcp.connection import Connection, Server

TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}


def identifier(name: str) -> str:
    """Return ``name`` as a Python identifier (non-word characters -> ``_``; a keyword or a leading digit gets a
    trailing / leading ``_``)."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = f"_{out}" if out else "_"
    return f"{out}_" if keyword.iskeyword(out) else out


def _type(schema: dict) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and ("anyOf" in schema or "oneOf" in schema):
        options = [o.get("type") for o in schema.get("anyOf", schema.get("oneOf", [])) if isinstance(o, dict)]
        kind = next((k for k in options if k and k != "null"), "string")
    return TYPES.get(kind, "str")


def _line(text: str | None, fallback: str) -> str:
    return " ".join((text or fallback).split())


def method_source(tool) -> tuple[str, str, dict[str, str]]:
    """Return ``(identifier, source, argument map)`` of the method for an MCP tool (``name``, ``description``,
    ``input_schema``): the map takes each Python argument name back to the schema's."""
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
    props, required = schema.get("properties") or {}, set(schema.get("required") or [])
    names: dict[str, str] = {}
    params, docs = [], []
    for arg in sorted(props, key=lambda a: a not in required):  # required arguments first (Python's order rule)
        py = identifier(arg)
        if py in names or py == "self":
            py = f"{py}_"
        names[py] = arg
        kind = _type(props[arg] or {})
        params.append(f"{py}: {kind}" if arg in required else f"{py}: {kind} | None = None")
        choices = (props[arg] or {}).get("enum")
        extra = f" (choices: {json.dumps(choices)})" if choices else ""
        docs.append(f"        {py}: {_line((props[arg] or {}).get('description'), arg)}{extra}")
    ident = identifier(tool.name)
    doc = _line(tool.description, tool.name)
    args_doc = "\n\n    Args:\n" + "\n".join(docs) if docs else ""
    pairs = "".join(f"({names[p]!r}, {p}), " for p in names)  # (schema name, Python argument)
    source = (f"def {ident}(self{''.join(', ' + p for p in params)}) -> str:\n"
              f"    {json.dumps(doc + args_doc.replace(chr(10) + '    ', chr(10)))}\n"
              f"    return self._call({tool.name!r}, {{k: v for k, v in ({pairs}) if v is not None}})\n")
    return ident, source, names


def env_class(tools: list, *, name: str = "MCPEnv") -> type:
    """Return an environment class with one method per tool (agentrl.envs.base: its public methods are the
    tools); DataError when two tools map to the same identifier."""
    methods: dict[str, Any] = {}
    for tool in tools:
        ident, source, _ = method_source(tool)
        if ident in methods or ident in ("reset", "get_reward"):
            raise DataError(f"MCP tool {tool.name!r} maps to the method name {ident!r}, which another tool or the "
                            "environment already uses: deny one of them ([...mcp] deny = [...])")
        scope: dict[str, Any] = {}
        exec(compile(source, f"<mcp tool {tool.name}>", "exec"), scope)  # noqa: S102 - source built from the schema
        fn = scope[ident]
        fn.__doc__ = fn.__doc__.strip()
        methods[ident] = fn
    return type(name, (MCPEnv,), {"__module__": __name__, **methods})


def content_text(result, max_chars: int, non_text: str) -> str:
    """Return a CallToolResult's content as the text the model reads: text parts joined, other parts as a short
    stand-in (ToolError with ``non_text = "refuse"``), cut at ``max_chars`` with a note of how much was left out."""
    parts = []
    for item in result.content or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
            continue
        if non_text == "refuse":
            raise ToolError(f"Error: the tool returned {kind} content, which this environment does not show "
                            "(non_text = \"refuse\")")
        mime = getattr(item, "mime_type", None) or getattr(getattr(item, "resource", None), "mime_type", None) or ""
        if kind in ("image", "audio"):
            parts.append(f"[{kind}: {mime}, {len(item.data or '') * 3 // 4:,} bytes]")
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource: {resource.uri} {mime}]".rstrip() + "]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {item.uri} {item.name}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... {len(text) - max_chars:,} more characters cut]"
    return text


class Sessions:
    """Where an environment's connection comes from: one per episode (``per_episode``), or one shared by every
    episode of the process (replaced when it breaks)."""

    def __init__(self, server: Server, *, per_episode: bool, call_timeout: float, startup_timeout: float):
        self.server, self.per_episode = server, per_episode
        self.call_timeout, self.startup_timeout = call_timeout, startup_timeout
        self._shared: Connection | None = None
        self._lock = threading.Lock()

    def new(self) -> Connection:
        """Return a fresh open connection."""
        return Connection(self.server, call_timeout=self.call_timeout, startup_timeout=self.startup_timeout).open()

    def for_episode(self, previous: Connection | None) -> Connection | None:
        """Return the connection an episode starts with (a per-episode one opens on its first call: None)."""
        if self.per_episode:
            if previous is not None:
                previous.close()
            return None
        with self._lock:
            if self._shared is None or self._shared.broken:
                if self._shared is not None:
                    self._shared.close()
                self._shared = self.new()
            return self._shared


class MCPEnv:
    """An episode with an MCP server's tools. Made concrete by :func:`env_class` (one method per tool);
    ``_configure`` gives it its sessions and limits (agentrl.envs.mcp.build)."""

    _sessions: Sessions | None = None
    _max_calls: int = 10
    _max_chars: int = 4000
    _non_text: str = "placeholder"

    def __init__(self):
        self._connection: Connection | None = None
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode (``row``: the task, kept for its final-state check; GRPO's rows carry it in ``task``)."""
        self._row = {**row, **row_metadata(row)}
        self.calls, self.tool_errors = 0, 0
        self.transcript: list[dict] = []
        if self._sessions is not None:
            self._connection = self._sessions.for_episode(self._connection)

    def _conn(self) -> Connection:
        if self._connection is None:  # a per-episode session opens on the episode's first call
            self._connection = self._sessions.new()
        elif self._connection.broken:  # replaced when the next episode starts (reset), not in the middle of this one
            raise ConnectionError("the MCP server stopped answering earlier in this episode (it is restarted for the "
                                  "next one)")
        return self._connection

    def _call(self, name: str, arguments: dict) -> str:
        if self.calls >= self._max_calls:
            raise ToolError(f"Error: tool-call limit reached ({self._max_calls}); answer now.")
        self.calls += 1
        try:
            result = self._conn().call(name, arguments)
        except Exception as exc:  # a refusal, a crash or a hang: the model reads it, the episode goes on
            self.tool_errors += 1
            self.transcript.append({"tool": name, "error": type(exc).__name__})
            raise ToolError(f"Error: {type(exc).__name__}: {exc}") from None
        text = content_text(result, self._max_chars, self._non_text)
        self.transcript.append({"tool": name, "error": bool(result.is_error)})
        if result.is_error:
            self.tool_errors += 1
            raise ToolError(text or f"Error: {name} failed")
        return text

    def _check(self, tool: str, arguments: dict) -> str | None:
        """Return the text of ``tool(arguments)`` called after the episode (a final-state check), None when the
        call fails."""
        try:
            result = self._conn().call(tool, arguments)
        except Exception:  # a broken server after the episode: the check fails, the run goes on
            return None
        return None if result.is_error else content_text(result, 1_000_000, "placeholder")

    def _close(self) -> None:
        if self._connection is not None and (self._sessions is None or self._sessions.per_episode):
            self._connection.close()
        self._connection = None


def mcp_score(prediction: str | None, row: dict, env) -> dict:
    """Return the episode's metrics: the answer metrics against ``golden_answers`` (em, f1, precision, recall,
    acc; the search environment's), ``state`` (1.0 when the row's ``final_check`` tool, called after the episode,
    returns text equal to ``expect`` after normalisation, else 0.0; absent without a check), ``success`` (``state``
    when there is a check and no gold, both when there are both, else ``em``) and ``tool_errors``."""
    row = {**(getattr(env, "_row", None) or {}), **{k: v for k, v in (row or {}).items() if v is not None}}
    row = {**row, **row_metadata(row)}
    golds = gold_list(row.get("golden_answers"))
    metrics = dict(answer_metrics(prediction, golds)) if golds else {"em": 0.0, "f1": 0.0, "acc": 0.0}
    check = row.get("final_check")
    success = metrics["em"]
    if check:
        text = env._check(check["tool"], check.get("arguments") or {}) if env is not None else None
        metrics["state"] = float(text is not None and normalize_answer(text) == normalize_answer(str(check["expect"])))
        success = metrics["state"] if not golds else min(metrics["state"], metrics["em"])
    metrics["success"] = success
    metrics["tool_errors"] = float(getattr(env, "tool_errors", 0))
    metrics["tool_calls"] = float(getattr(env, "calls", 0))
    return metrics


def oracle_plan(row: dict) -> list:
    """Return the oracle's turns for a task row with a ``plan`` (a list of ``{"tool", "arguments"}`` calls, made one
    per turn), then the first gold answer; a row without one answers at once."""
    row = {**row, **row_metadata(row)}
    turns = [Turn(tool_calls=[{"id": f"call_{i}", "name": identifier(step["tool"]),
                               "arguments": json.dumps(step.get("arguments") or {})}])
             for i, step in enumerate(row.get("plan") or [])]
    golds = gold_list(row.get("golden_answers"))
    return [*turns, Turn(content=f"<answer>{golds[0] if golds else 'done'}</answer>", finish_reason="stop")]
