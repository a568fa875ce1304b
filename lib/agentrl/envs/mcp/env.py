"""The MCP environment's episode: an environment class made from a server's ``tools/list``, one method per tool.

:func:`env_class` builds each tool as a function object (never Python source: no name or description a server
sends can become code) whose signature has the input schema's top-level arguments, and which carries the tool
definition the model sees (``__tool_schema__``): the server's ``inputSchema`` as it is (array items, nested objects,
enums, required, descriptions), with the top-level argument names as the callable names. Evaluation, the SFT
export and TRL's rendering all read that definition (agentrl.envs.base.schema_of; the GRPO trainer hands TRL the
definitions instead of the methods).

Names: the server's tools live apart from the environment's own attributes, which are all private (``_calls``,
``_call``, ...), so a tool may be called anything. A tool or argument name becomes a public Python identifier
(:func:`identifier`: ``list-files`` -> ``list_files``, ``_call`` -> ``call``, ``3d-render`` -> ``tool_3d_render``,
``reset`` -> ``reset_``); the call goes out under the server's own name. Two names that become the same identifier
are an error naming both (deny one). An argument the schema does not require defaults to None and is left out of
the call.

Each call is bounded (:class:`agentrl.envs.mcp.connection.Connection`); a result is its text content, cut at
``max_result_chars``; an image, audio or resource content becomes a short stand-in (``[image: image/png, 12,345
bytes]``) or, with ``non_text = "refuse"``, a tool error. A server that answers ``isError``, crashes or hangs gives
the model a tool error for that call; a crashed or hung server is replaced for the next episode, never the run.
Every value read from this process's environment for the server (``env_from``, ``headers_from``, ``url_from``) is
replaced by ``[redacted:NAME]`` in what the model reads (results, errors) before anything is recorded.
"""

from __future__ import annotations

import atexit
import inspect
import json
import keyword
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.core.chat import Turn
from agentrl.core.io import DataError
from agentrl.core.metrics import answer_metrics, gold_list, normalize_answer
from agentrl.envs.base import EnvironmentDown, ToolError, row_metadata
from agentrl.envs.mcp.connection import Connection, Server

TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}
# names a tool or an argument cannot take: the environment's own (TRL calls them) and the receiver
TAKEN = frozenset({"reset", "get_reward", "self"})
DESCRIPTION_CHARS = 2000  # MCPSettings.max_description_chars' default
FAILED_STARTS = 3  # a server that fails to start this many times in a row is gone for good: the run stops


def identifier(name: str, prefix: str = "tool") -> str:
    """Return ``name`` as a public Python identifier: characters other than ASCII letters, digits and ``_`` become
    ``_``, leading and trailing ``_`` go, a leading digit (or nothing left) gets ``prefix``, a keyword or a name the
    environment takes (reset, get_reward, self) a trailing ``_``."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", str(name)).strip("_")
    if not out or out[0].isdigit():
        out = f"{prefix}_{out}" if out else prefix
    return f"{out}_" if keyword.iskeyword(out) or out in TAKEN else out


def _kind(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and ("anyOf" in schema or "oneOf" in schema):
        options = [o.get("type") for o in schema.get("anyOf", schema.get("oneOf", [])) if isinstance(o, dict)]
        kind = next((k for k in options if k and k != "null"), None)
    return kind


def type_hint(schema: Any) -> Any:
    """Return the Python type for an argument's JSON schema (a boolean subschema, valid JSON Schema, is ``Any``):
    an enum of plain values is a Literal, an array a ``list[items]``, an object a ``dict``."""
    if not isinstance(schema, dict):
        return Any
    choices = schema.get("enum")
    if isinstance(choices, list) and choices and all(isinstance(c, str | int | float | bool) for c in choices):
        return Literal[tuple(choices)]
    kind = _kind(schema)
    if kind == "array":
        items = schema.get("items")
        return list[type_hint(items)] if isinstance(items, dict) and items else list
    return TYPES.get(kind, Any) if kind else Any


def capped(text: Any, limit: int) -> str:
    """Return ``text`` (stripped) cut at ``limit`` characters with a note of how many were left out."""
    text = str(text or "").strip()
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit:,} more characters cut]"


def _capped_schema(schema: Any, limit: int) -> Any:
    # every "description" inside an argument's schema, at any depth, cut at the same limit
    if isinstance(schema, dict):
        return {k: capped(v, limit) if k == "description" and isinstance(v, str) else _capped_schema(v, limit)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_capped_schema(v, limit) for v in schema]
    return schema


@dataclass(frozen=True)
class ToolSpec:
    """One server tool as the model sees it: ``name`` (the callable's), ``server_name``, ``arguments`` (callable
    argument -> the server's, in the signature's order: required first), ``required``, the definition
    ``schema`` (``{"type": "function", "function": {...}}``) and ``cut`` (whether a description was capped)."""

    name: str
    server_name: str
    arguments: dict
    required: frozenset
    schema: dict
    cut: bool


def tool_spec(tool, max_description_chars: int = DESCRIPTION_CHARS) -> ToolSpec:
    """Return the :class:`ToolSpec` of an MCP tool (``name``, ``description``, ``inputSchema``); DataError when two
    of its argument names become the same identifier."""
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
    schema = schema if isinstance(schema, dict) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = {a for a in schema.get("required") or [] if a in props}
    arguments: dict[str, str] = {}
    for arg in sorted(props, key=lambda a: a not in required):  # required arguments first (Python's order rule)
        py = identifier(arg, "arg")
        if py in arguments:
            raise DataError(f"MCP tool {tool.name!r}: its arguments {arguments[py]!r} and {arg!r} both become "
                            f"{py!r}; deny the tool ([...mcp] deny = [{json.dumps(tool.name)}])")
        arguments[py] = arg
    limit = max_description_chars
    description = capped(tool.description or tool.name, limit)
    properties = {py: _capped_schema(props[arg] if isinstance(props[arg], dict) else {}, limit)
                  for py, arg in arguments.items()}
    cut = len(str(tool.description or "").strip()) > limit or json.dumps(properties) != json.dumps(
        {py: props[arg] if isinstance(props[arg], dict) else {} for py, arg in arguments.items()})
    parameters = {**{k: v for k, v in schema.items() if k not in ("properties", "required", "$schema")},
                  "type": "object", "properties": properties}
    if required:
        parameters["required"] = [py for py, arg in arguments.items() if arg in required]
    name = identifier(tool.name)
    definition = {"type": "function", "function": {"name": name, "description": description,
                                                   "parameters": parameters, "return": {"type": "string"}}}
    return ToolSpec(name, tool.name, arguments, frozenset(py for py, a in arguments.items() if a in required),
                    definition, cut)


def tool_function(spec: ToolSpec):
    """Return the method for ``spec``: a function object (no source is generated) whose signature, annotations and
    Google-style docstring describe the tool, carrying the definition in ``__tool_schema__``; calling it sends the
    given arguments under the server's names (None left out)."""
    props = spec.schema["function"]["parameters"]["properties"]
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for py in spec.arguments:
        hint = type_hint(props[py])
        if py in spec.required:
            params.append(inspect.Parameter(py, inspect.Parameter.KEYWORD_ONLY, annotation=hint))
        else:
            params.append(inspect.Parameter(py, inspect.Parameter.KEYWORD_ONLY, annotation=hint | None, default=None))
    signature = inspect.Signature(params, return_annotation=str)
    server_name, names = spec.server_name, dict(spec.arguments)

    def tool(self, **arguments):
        signature.bind(self, **arguments)  # a missing or unknown argument: Python's own TypeError
        return self._call(server_name, {names[k]: v for k, v in arguments.items() if v is not None})

    docs = [f"    {py}: {_line(props[py].get('description'), names[py])}" for py in spec.arguments]
    tool.__name__ = tool.__qualname__ = spec.name
    tool.__signature__ = signature
    tool.__annotations__ = {p.name: p.annotation for p in params[1:]} | {"return": str}
    tool.__doc__ = _line(spec.schema["function"]["description"], spec.name) + (
        "\n\nArgs:\n" + "\n".join(docs) if docs else "")
    tool.__tool_schema__ = spec.schema
    return tool


def _line(text: str | None, fallback: str) -> str:
    return " ".join((text or fallback).split())


def env_class(tools: list, *, name: str = "MCPEnv", max_description_chars: int = DESCRIPTION_CHARS) -> type:
    """Return an environment class with one method per tool (agentrl.envs.base: its public methods are the tools);
    DataError naming both tools when two names become the same identifier. Prints one line naming the tools whose
    descriptions were cut at ``max_description_chars``."""
    methods: dict[str, Any] = {}
    owners: dict[str, str] = {}
    cut = []
    for tool in tools:
        spec = tool_spec(tool, max_description_chars)
        if spec.name in owners:
            raise DataError(f"MCP tools {owners[spec.name]!r} and {tool.name!r} both become the tool name "
                            f"{spec.name!r}; deny one of them ([...mcp] deny = [...])")
        owners[spec.name] = tool.name
        methods[spec.name] = tool_function(spec)
        cut += [tool.name] if spec.cut else []
    if cut:
        print(f"mcp: descriptions cut at {max_description_chars:,} characters (max_description_chars) in the tools "
              f"{', '.join(cut)}")
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
            parts.append(text if text is not None else f"[resource: {resource.uri} {mime}".rstrip() + "]")
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


_OPEN: weakref.WeakSet = weakref.WeakSet()  # every Sessions of this process: their shared connections close at exit
_EXIT_HOOK: list = []


def close_sessions() -> None:
    """Close every shared session this process still holds (run at exit: a shared server never outlives it)."""
    for sessions in list(_OPEN):
        sessions.close()


class Sessions:
    """Where an environment's connection comes from: one per episode (``per_episode``), or one shared by every
    episode of the process (replaced when it breaks; closed by :meth:`close` or at the process's exit)."""

    def __init__(self, server: Server, *, per_episode: bool, call_timeout: float, startup_timeout: float):
        self.server, self.per_episode = server, per_episode
        self.call_timeout, self.startup_timeout = call_timeout, startup_timeout
        self._shared: Connection | None = None
        self._lock = threading.RLock()  # for_episode opens the shared connection while holding it
        self._failed, self._why = 0, ""  # failed starts in a row, and the last one's message
        _OPEN.add(self)
        if not _EXIT_HOOK:  # registered on first use, not at import
            _EXIT_HOOK.append(atexit.register(close_sessions))

    def close(self) -> None:
        """Close the shared connection, if one is open (the next episode opens a new one)."""
        with self._lock:
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()

    def new(self) -> Connection:
        """Return a fresh open connection; DataError when the server does not start, EnvironmentDown once it has
        failed FAILED_STARTS times in a row."""
        self.check()
        try:
            connection = Connection(self.server, call_timeout=self.call_timeout,
                                    startup_timeout=self.startup_timeout).open()
        except DataError as exc:
            with self._lock:
                self._failed, self._why = self._failed + 1, str(exc)
            self.check()
            raise
        with self._lock:
            self._failed = 0
        return connection

    def check(self) -> None:
        """Raise EnvironmentDown when the server has failed to start FAILED_STARTS times in a row."""
        if self._failed >= FAILED_STARTS:
            raise EnvironmentDown(f"{self._why} ({self._failed} starts in a row failed: the server is gone, the "
                                  "run stops)")

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
    _reset_call: tuple[str, dict] | None = None  # (server tool, arguments) called at each episode's start

    def __init__(self):
        self._connection: Connection | None = None
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode (``row``: the task, kept for its final-state check; GRPO's rows carry it in ``task``)."""
        self._row = {**row, **row_metadata(row)}
        self._calls, self._tool_errors = 0, 0
        self._transcript: list[dict] = []
        self._checked: dict[str, str | None] = {}
        if self._sessions is not None:
            self._sessions.check()  # a server gone for good ends the run here too (GRPO's rollouts call reset)
            self._connection = self._sessions.for_episode(self._connection)
        if self._reset_call is not None and row:  # an episode's start (not the bare construction): the server's
            # own reset, for state a new session does not clear
            tool, arguments = self._reset_call
            result = self._conn().call(tool, arguments)
            if result.is_error:
                raise DataError(self._sessions.server.redact(
                    f"mcp.reset_tool {tool}: the server refused it: {content_text(result, 300, 'placeholder')}"))

    def _conn(self) -> Connection:
        if self._connection is None:  # a per-episode session opens on the episode's first call
            self._connection = self._sessions.new()
        elif self._connection.broken:  # replaced when the next episode starts (reset), not in the middle of this one
            raise ConnectionError("the MCP server stopped answering earlier in this episode (it is restarted for the "
                                  "next one)")
        return self._connection

    def _call(self, name: str, arguments: dict) -> str:
        if self._calls >= self._max_calls:
            raise ToolError(f"Error: tool-call limit reached ({self._max_calls}); answer now.")
        self._calls += 1
        redact = self._sessions.server.redact if self._sessions is not None else str
        try:
            result = self._conn().call(name, arguments)
            text = content_text(result, self._max_chars, self._non_text)
        except EnvironmentDown:
            self._tool_errors += 1
            raise
        except Exception as exc:  # a refusal, a crash or a hang: the model reads it, the episode goes on
            self._tool_errors += 1
            self._transcript.append({"tool": name, "error": type(exc).__name__})
            message = str(exc) if isinstance(exc, ToolError) else f"Error: {type(exc).__name__}: {exc}"
            raise ToolError(redact(message)) from None
        self._transcript.append({"tool": name, "error": bool(result.is_error)})
        if result.is_error:
            self._tool_errors += 1
            raise ToolError(redact(text or f"Error: {name} failed"))
        return redact(text)

    def _check(self, tool: str, arguments: dict) -> str | None:
        """Return the text of ``tool(arguments)`` called after the episode (a final-state check), None when the
        call fails. Called once per episode: every reward and metric that asks again reads the first answer (a
        check that changes the server's state would otherwise score one completion two ways)."""
        key = json.dumps([tool, arguments], sort_keys=True, default=str)
        checked = self.__dict__.setdefault("_checked", {})
        if key not in checked:
            try:
                result = self._conn().call(tool, arguments)
                checked[key] = None if result.is_error else content_text(result, 1_000_000, "placeholder")
            except Exception:  # a broken server after the episode: the check fails, the run goes on
                checked[key] = None
        return checked[key]

    def _interrupt(self) -> None:
        # the item's time ran out while a call waits on the server: end the wait now (agentrl.envs.base.call_tool)
        if self._connection is not None:
            self._connection.interrupt()

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
    metrics["tool_errors"] = float(getattr(env, "_tool_errors", 0))
    metrics["tool_calls"] = float(getattr(env, "_calls", 0))
    return metrics


def oracle_plan(row: dict) -> list:
    """Return the oracle's turns for a task row with a ``plan`` (a list of ``{"tool", "arguments"}`` calls, made one
    per turn), then the first gold answer; a row without one answers at once."""
    row = {**row, **row_metadata(row)}
    # the plan names tools and arguments as the server does (or as the model sees them): both map to the callables'
    turns = [Turn(tool_calls=[{"id": f"call_{i}", "name": identifier(step["tool"]), "arguments": json.dumps(
        {identifier(k, "arg"): v for k, v in (step.get("arguments") or {}).items()}, ensure_ascii=False)}])
             for i, step in enumerate(row.get("plan") or [])]
    golds = gold_list(row.get("golden_answers"))
    return [*turns, Turn(content=f"<answer>{golds[0] if golds else 'done'}</answer>", finish_reason="stop")]
