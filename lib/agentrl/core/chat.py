"""The chat protocol every phase shares: assistant turns, hermes ``<tool_call>`` blocks, ``<answer>`` tags, and the
conversion of trajectory messages (OpenAI chat) into what chat templates expect."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


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

def to_template_messages(messages: list[dict]) -> list[dict]:
    """Return messages ready for ``tokenizer.apply_chat_template``.

    Tool-call arguments become dicts (templates such as Qwen2.5's apply ``tojson`` to them, which would
    double-encode a JSON string), tool messages keep their ``name``, and trajectory-only keys (ids,
    reasoning) are dropped. Unparseable arguments stay as the raw string.
    """
    out = []
    for m in messages:
        mm = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            mm["tool_calls"] = [{"type": "function", "function": {"name": tc["function"]["name"] or "",
                                                                  "arguments": _args(tc["function"]["arguments"])}}
                                for tc in m["tool_calls"]]
        if m["role"] == "tool" and m.get("name"):
            mm["name"] = m["name"]
        out.append(mm)
    return out


def _args(raw):
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return value if isinstance(value, dict) else raw


def render(tokenizer, messages: list[dict], tools: list[dict] | None, *, generation_prompt: bool = False,
           chat_template: str | None = None, **template_kwargs) -> str:
    """Return the chat-template text of trajectory ``messages`` with ``tools`` (what a local model sees)."""
    return tokenizer.apply_chat_template(to_template_messages(messages), tools=tools or None, tokenize=False,
                                         add_generation_prompt=generation_prompt, chat_template=chat_template,
                                         **template_kwargs)

def extract_answer(text: str | None) -> str | None:
    """Return the stripped content of the last ``<answer>...</answer>`` in ``text``, or None."""
    found = _ANSWER.findall(text or "")
    return found[-1].strip() if found else None


def first_user_text(messages) -> str:
    """Return the text of the first user message of a conversation ("" without one): the question of an SFT row, a
    preference pair's prompt or a trajectory (what a training run's ``train_items.jsonl`` records)."""
    for m in messages or []:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return ""
