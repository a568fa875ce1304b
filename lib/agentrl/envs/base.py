"""The environment contract, shared by evaluation, trajectory synthesis and TRL's GRPO ``environment_factory``.

An environment is a plain class: ``reset(**row)`` starts an episode, every public method is a tool (typed
arguments, Google-style docstring), ``get_reward()`` is optional. Tool schemas come from
``transformers.utils.get_json_schema`` so evaluation, SFT data and GRPO render identical tool definitions.
TRL 1.14 lists the bound methods of an instance (classmethods included), so helpers that must not become tools
are private (leading underscore) or module-level functions; this module applies the same rule.

A tool that refuses a call (a limit reached, a statement that failed, a value it cannot use) raises
:class:`ToolError` with the text the model reads; any other exception is a crash of the tool. Both loops turn
either into a tool message and never stop the episode: ours (:func:`call_tool`) records the kind on the message,
TRL's renders ``{'error': ...}``; the environment itself remembers why each of its calls failed
(:func:`instrumented`), so :func:`tool_outcomes` gives one typed signal for both.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from agentrl.core.io import DataError

RESERVED = ("reset", "get_reward")
# the kinds of failed tool calls: the call itself was malformed (the model's format) ...
FORMAT_ERRORS = frozenset({"invalid_tool_call", "unknown_tool", "invalid_arguments"})
# ... or the tool ran and refused (tool_error) or crashed (tool_exception)


class EnvironmentDown(DataError):
    """The environment cannot serve another episode (a server that failed to start several times in a row): not a
    tool message for the model but the end of the run, exit 2 with this message (evaluation, GRPO's next reset)."""


class ToolError(Exception):
    """A tool's refusal of a call (a limit reached, a failed statement, an unusable value): the model reads the
    message as it is and may try again. Other exceptions are rendered ``Error: <Type>: <message>``."""


@functools.cache
def _tool_names(cls: type) -> tuple[str, ...]:
    # plain functions and classmethods: what inspect.ismethod finds on an instance, without building one
    names = []
    for name in sorted(dir(cls)):
        if name in RESERVED or name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if inspect.isfunction(raw) or isinstance(raw, classmethod):
            names.append(name)
    return tuple(names)


def schema_of(fn: Callable) -> dict:
    """Return the tool definition of ``fn`` (``{"type": "function", "function": {...}}``): the one it carries in
    ``__tool_schema__`` (an MCP server's own schema, which type hints cannot say in full), else
    ``transformers.utils.get_json_schema``'s."""
    carried = getattr(fn, "__tool_schema__", None)
    if carried is not None:
        return json.loads(json.dumps(carried))
    from transformers.utils import get_json_schema

    return get_json_schema(fn)


@functools.cache
def _schemas(cls: type) -> tuple[str, ...]:
    return tuple(json.dumps(schema_of(getattr(cls, name))) for name in sorted(_tool_names(cls)))


@functools.cache
def _call_signature(cls: type, name: str) -> inspect.Signature:
    # the bound method's signature (self or cls dropped), built once per class: inspect.signature on every
    # call was a tenth of the harness's CPU per tool call
    raw = inspect.getattr_static(cls, name)
    sig = inspect.signature(raw.__func__ if isinstance(raw, classmethod) else raw)
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def tool_methods(env: Any) -> dict[str, Any]:
    """Return ``{name: bound method}`` for the env's tools, by the same rule TRL applies."""
    return {name: getattr(env, name) for name in _tool_names(type(env))}


def tool_schemas(env: Any) -> list[dict]:
    """Return the JSON schemas of the env's tools (``{"type": "function", "function": {...}}``), sorted by name.

    Built once per class (docstring parsing is not free) and returned as fresh copies.
    """
    return [json.loads(s) for s in _schemas(type(env))]


def api_tools(schemas: list[dict]) -> list[dict]:
    """Return the schemas as an OpenAI ``tools`` request field (without the non-standard ``return`` entry)."""
    return [{"type": "function", "function": {k: v for k, v in s["function"].items() if k != "return"}}
            for s in schemas]


# tool arguments are a query or a statement: anything larger is a runaway generation, answered as a tool error
MAX_ARGUMENT_CHARS = 100_000


def parse_arguments(raw: Any) -> dict:
    """Return tool-call arguments as a dict; ``raw`` is a JSON string (OpenAI) or already a dict.

    Raises ValueError with a readable message for invalid JSON or a non-object.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str) and len(raw) > MAX_ARGUMENT_CHARS:
        raise ValueError(f"arguments of {len(raw):,} characters exceed the limit of {MAX_ARGUMENT_CHARS:,}")
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"invalid JSON in arguments ({exc}): {str(raw)[:200]}") from None
    except RecursionError:
        raise ValueError("arguments are nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


async def call_tool(env: Any, name: str, raw_arguments: Any) -> tuple[str, str | None]:
    """Run one tool call; return ``(content, error_kind)`` where error_kind is None on success.

    Never raises for a bad call: an unknown tool, invalid JSON arguments, wrong argument names/types and
    exceptions inside the tool all come back as ``"Error: ..."`` text for the model to read, with
    error_kind ``unknown_tool`` / ``invalid_arguments`` / ``tool_exception`` (a ToolError: its own message, kind
    ``tool_error``). Sync tools run in a thread; when the
    call is cancelled (an item timeout), the env's ``_interrupt()`` (if it has one) stops the work in that thread
    and the cancellation waits for the thread to return, so nothing is still running once the item is recorded.
    """
    tools = tool_methods(env)
    fn = tools.get(name)
    if fn is None:
        return f"Error: unknown tool '{name}'. Available tools: {', '.join(sorted(tools)) or 'none'}.", "unknown_tool"
    try:
        args = parse_arguments(raw_arguments)
        _call_signature(type(env), name).bind(**args)
    except (ValueError, TypeError) as exc:
        return f"Error: invalid arguments for {name}: {exc}", "invalid_arguments"
    try:
        result = await fn(**args) if inspect.iscoroutinefunction(fn) else await _in_thread(env, fn, args)
    except EnvironmentDown:  # nothing the model can do: the run stops
        raise
    except ToolError as exc:  # a refusal: the tool chose the words
        return str(exc), "tool_error"
    except Exception as exc:  # the model reads the error and can try again
        return f"Error: {type(exc).__name__}: {exc}", "tool_exception"
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False), None


# how long a cancelled call waits for its thread after interrupting it (an env without ``_interrupt`` may not stop)
INTERRUPT_WAIT = 10.0


async def _in_thread(env: Any, fn, args: dict):
    work = asyncio.ensure_future(asyncio.to_thread(fn, **args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        # cancelling the await does not stop the thread: interrupt the work itself, then let it finish
        interrupt = getattr(env, "_interrupt", None)
        if interrupt is not None:
            with contextlib.suppress(Exception):  # the cancellation goes on whatever the interrupt did
                interrupt()
        await asyncio.wait({work}, timeout=INTERRUPT_WAIT)
        if work.done() and not work.cancelled():
            work.exception()  # the interrupted call's own error is no one's news: not "never retrieved" at exit
        raise


def row_metadata(row: dict) -> dict:
    """Return a task row's metadata: its ``metadata``, else the ``task`` column (JSON text) in which GRPO's dataset
    carries it (Arrow cannot hold rows whose metadata differ in shape); ``{}`` when it has neither."""
    meta = row.get("metadata")
    if meta is None and isinstance(row.get("task"), str):
        meta = json.loads(row["task"])
    return meta if isinstance(meta, dict) else dict(meta or {})


def instrumented(factory: Callable[[], Any], name: str) -> Callable[[], Any]:
    """Return a factory like ``factory`` whose environments are instances of :func:`recording` subclasses: each
    knows its environment's registry ``name``, decodes a GRPO row's ``task`` column into ``metadata`` before its own
    ``reset`` sees the row, and remembers why its tool calls failed (for :func:`tool_outcomes`)."""

    def make():
        env = factory()
        cls = type(env)
        if not getattr(cls, "_agentrl_recording", False):
            try:
                env.__class__ = recording(cls, name)  # same layout, methods wrapped: the instance stays as built
            except TypeError as exc:  # __slots__ or a C type: its tool failures could not be told apart
                raise TypeError(f"environment {name}: {cls.__name__} instances cannot be instrumented ({exc}); "
                                "use a plain class (no __slots__)") from None
        env._tool_failures = {}
        return env

    return make


@functools.cache
def recording(cls: type, name: str) -> type:
    """Return a subclass of ``cls`` (same name) whose tools record their failures and whose ``reset`` takes GRPO's
    rows."""
    attrs: dict[str, Any] = {"_agentrl_recording": True, "_agentrl_env": name, "__module__": cls.__module__,
                             "__qualname__": cls.__qualname__}
    reset = cls.reset

    def reset_row(self, **row):
        self._tool_failures = {}
        if "metadata" not in row and isinstance(row.get("task"), str):
            row = {**row, "metadata": row_metadata(row)}
        return reset(self, **row)

    attrs["reset"] = functools.wraps(reset)(reset_row)
    for tool in _tool_names(cls):
        raw = inspect.getattr_static(cls, tool)
        if inspect.isfunction(raw):
            attrs[tool] = _recorded(raw, tool)
    return type(cls.__name__, (cls,), attrs)


def _recorded(fn, tool: str):
    signature = inspect.signature(fn)

    def failed(self, args, kwargs, exc: Exception) -> None:
        if isinstance(exc, ToolError):
            kind = "tool_error"
        elif isinstance(exc, TypeError) and not _binds(signature, self, args, kwargs):
            kind = "invalid_arguments"  # TRL calls a tool without binding its arguments first
        else:
            kind = "tool_exception"
        failures = self.__dict__.setdefault("_tool_failures", {})
        failures[str(exc)] = kind  # TRL renders {'error': str(exc)}: the text finds the kind again

    if inspect.iscoroutinefunction(fn):
        async def wrapper(self, *args, **kwargs):
            try:
                return await fn(self, *args, **kwargs)
            except Exception as exc:
                failed(self, args, kwargs, exc)
                raise
    else:
        def wrapper(self, *args, **kwargs):
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:
                failed(self, args, kwargs, exc)
                raise

    return functools.wraps(fn)(wrapper)


def _binds(signature: inspect.Signature, self, args: tuple, kwargs: dict) -> bool:
    try:
        signature.bind(self, *args, **kwargs)
    except TypeError:
        return False
    return True


def tool_outcomes(completion, env: Any = None) -> list[str | None]:
    """Return, for each tool message of ``completion`` (a message list), None when the call succeeded, else the
    kind of failure: a FORMAT_ERRORS kind (the call was malformed) or ``tool_error`` / ``tool_exception`` (the
    tool refused or crashed). Our agent loop writes the kind on the message (``error``); in TRL's rollouts a failed
    call reads ``{'error': ...}`` and ``env`` (the episode's environment) knows the kind from its own record; a
    failure it did not record never reached a tool (no such tool): ``unknown_tool``."""
    if not isinstance(completion, list):
        return []
    failures = (getattr(active_env(env), "_tool_failures", None) if env is not None else None) or {}
    out: list[str | None] = []
    for m in completion:
        if not isinstance(m, dict) or m.get("role") != "tool":
            continue
        if m.get("error"):
            out.append(m["error"])
            continue
        text = _trl_error(m.get("content"))
        out.append(None if text is None else failures.get(text, "unknown_tool"))
    return out


def _trl_error(content) -> str | None:
    # TRL 1.14's rendering of a failed tool call: str({"error": str(exc)})
    if not isinstance(content, str) or not content.startswith("{'error': "):
        return None

    try:
        value = ast.literal_eval(content)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value.get("error") if isinstance(value, dict) and len(value) == 1 else None


def active_env(env: Any) -> Any:
    """Return the environment that played the episode: a routing environment's current one (``_active()``, the
    mixed environment's row family), else ``env`` itself."""
    active = getattr(env, "_active", None)
    return active() if callable(active) else env
