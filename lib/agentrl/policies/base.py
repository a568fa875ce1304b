"""What every policy returns, and the hermes ``<tool_call>`` parser shared by local models and endpoints."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


# Tool arguments are a flat object; deeper nesting is a runaway or hostile generation. Past this depth they are not
# forwarded (the tool gets a text it refuses, so the model reads a tool error) and never serialised recursively.
MAX_ARGUMENT_DEPTH = 64


def arguments_text(args, *, ensure_ascii: bool = True) -> str:
    """Return tool-call arguments as the JSON text a tool parses: a string as it came, None as ``{}``, any other
    JSON value serialised, except a value nested deeper than ``MAX_ARGUMENT_DEPTH``, which becomes a short note
    that is no JSON (the call then fails as ``invalid_arguments``, with the note in the model's error)."""
    if isinstance(args, str):
        return args
    if args is None:
        return "{}"
    if nested_deeper_than(args, MAX_ARGUMENT_DEPTH):
        return f"arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels (not forwarded)"
    try:
        return json.dumps(args, ensure_ascii=ensure_ascii)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"arguments that cannot be serialised ({type(exc).__name__})"


def nested_deeper_than(value, limit: int) -> bool:
    """Return whether lists/dicts in ``value`` nest more than ``limit`` levels (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


@dataclass
class Turn:
    """One assistant turn: text, tool calls (OpenAI shape: id, name, arguments JSON string), usage, timing.

    A tool call whose text could not be parsed has ``name=None`` and the raw text in ``arguments``.
    """

    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0


def parse_hermes(text: str, id_prefix: str = "call") -> tuple[str, list[dict], str | None]:
    """Split hermes-format model output into ``(content, tool_calls, reasoning)``.

    ``<think>...</think>`` (or text before a lone ``</think>``) is the reasoning; each
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` becomes a tool call whose arguments are
    re-serialised as a JSON string; an unterminated or invalid block becomes a call with ``name=None``.
    """
    reasoning = None
    m = _THINK.match(text)
    if m and "</think>" in text:
        reasoning = m.group(1).strip() or None
        text = text[m.end():]
    calls = []
    for i, body in enumerate(_TOOL_CALL.findall(text)):
        call_id = f"{id_prefix}_{i}"
        try:
            obj = json.loads(body.strip())
            name, args = obj["name"], obj.get("arguments", {})
            if not isinstance(name, str):
                raise TypeError("name is not a string")
            calls.append({"id": call_id, "name": name, "arguments": arguments_text(args, ensure_ascii=False)})
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # too deep for json: invalid
            calls.append({"id": call_id, "name": None, "arguments": body.strip()})
    content = _TOOL_CALL.sub("", text).strip()
    return content, calls, reasoning
