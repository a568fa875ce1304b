"""Conversions between the trajectory message format (OpenAI chat) and what chat templates expect."""

from __future__ import annotations

import json


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
