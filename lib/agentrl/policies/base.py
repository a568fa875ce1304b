"""What every policy returns, and the hermes ``<tool_call>`` parser shared by local models and endpoints."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


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
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append({"id": call_id, "name": name, "arguments": arguments})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            calls.append({"id": call_id, "name": None, "arguments": body.strip()})
    content = _TOOL_CALL.sub("", text).strip()
    return content, calls, reasoning
