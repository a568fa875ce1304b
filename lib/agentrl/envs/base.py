"""The environment contract, shared by evaluation, trajectory synthesis and TRL's GRPO ``environment_factory``.

An environment is a plain class: ``reset(**row)`` starts an episode, every public method is a tool (typed
arguments, Google-style docstring), ``get_reward()`` is optional. Tool schemas come from
``transformers.utils.get_json_schema`` so evaluation, SFT data and GRPO render identical tool definitions.
TRL 1.14 lists the bound methods of an instance (classmethods included), so helpers that must not become tools
are private (leading underscore) or module-level functions; this module applies the same rule.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any

RESERVED = ("reset", "get_reward")


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


@functools.cache
def _schemas(cls: type) -> tuple[str, ...]:
    from transformers.utils import get_json_schema

    return tuple(json.dumps(get_json_schema(getattr(cls, name))) for name in sorted(_tool_names(cls)))


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
    error_kind ``unknown_tool`` / ``invalid_arguments`` / ``tool_exception``. Sync tools run in a thread; when the
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
    except Exception as exc:  # the model reads the error and can try again
        return f"Error: {type(exc).__name__}: {exc}", "tool_exception"
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False), None


# how long a cancelled call waits for its thread after interrupting it (an env without ``_interrupt`` may not stop)
INTERRUPT_WAIT = 10.0


async def _in_thread(env: Any, fn, args: dict):
    import asyncio
    import contextlib

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
        raise
