"""Whether a chat template lets multi-turn GRPO read, token for token, what the model sampled.

TRL's tool loop never re-renders a rollout: each turn's prompt is the previous prompt's tokens, the sampled tokens and
the tool result's tokens (``_get_tool_suffix_ids``: the template's rendering of the tool message, taken as the
difference of two renderings). That holds only when rendering a conversation one message longer keeps the earlier
rendering as its prefix. A template that is not prefix-preserving (one that drops earlier turns' reasoning, or
renders an assistant message differently once a later message follows) makes the training context differ from what
any later inference renders, and TRL replaces such templates only for the model families it knows (SmolLM2 is not
among them). :func:`check_template` renders a realistic tool conversation turn by turn with the environment's tools
and either returns one line or raises naming the first turn and token that differ.
"""

from __future__ import annotations

import json

from agentrl.core.io import DataError


def sample_conversation(tool: dict | None) -> list[dict]:
    """Return a four-turn conversation calling ``tool`` (a tool definition's ``function``; a stand-in without one):
    system, user, an assistant turn with reasoning text and a tool call, its result, a second call and result, the
    answer."""
    name = (tool or {}).get("name", "lookup")
    props = list(((tool or {}).get("parameters") or {}).get("properties") or {})
    arguments = {p: "x" for p in props[:1]}
    call = [{"type": "function", "function": {"name": name, "arguments": arguments}}]
    return [{"role": "system", "content": "You are an agent with tools."},
            {"role": "user", "content": "Find the answer."},
            {"role": "assistant", "content": "I will look it up first.", "tool_calls": call},
            {"role": "tool", "name": name, "content": "first result"},
            {"role": "assistant", "content": "Once more, to be sure.", "tool_calls": call},
            {"role": "tool", "name": name, "content": "second result"},
            {"role": "assistant", "content": "<answer>x</answer>"}]


def _render(tokenizer, messages: list[dict], tools, chat_template, generation_prompt: bool) -> list[int]:
    try:
        ids = tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template, tokenize=True,
                                            add_generation_prompt=generation_prompt, return_dict=False)
    except TypeError:  # templates that want the arguments as a JSON string (TRL's own fallback)
        messages = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(
            c["function"]["arguments"])}} for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]
        ids = tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template, tokenize=True,
                                            add_generation_prompt=generation_prompt, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def check_template(tokenizer, tools: list[dict] | None = None, chat_template: str | None = None,
                   model: str = "the model") -> str:
    """Return one line saying the template keeps every earlier turn's tokens when a turn is added (the conversation
    of :func:`sample_conversation`, with ``tools``: tool definitions); DataError naming the turn, its role and the
    first differing token otherwise. ``chat_template`` is the one training renders with (TRL's replacement, if
    any; None: the tokenizer's)."""
    messages = sample_conversation((tools or [{}])[0].get("function") if tools else None)
    previous = _render(tokenizer, messages[:2], tools, chat_template, True)
    for turn in range(2, len(messages)):
        # before an assistant turn the context ends with the generation prompt, as TRL samples it
        follows_assistant = turn + 1 < len(messages) and messages[turn + 1]["role"] == "assistant"
        current = _render(tokenizer, messages[:turn + 1], tools, chat_template, follows_assistant)
        if current[:len(previous)] != previous:
            at = next((i for i, (a, b) in enumerate(zip(previous, current, strict=False)) if a != b),
                      min(len(previous), len(current)))
            was = tokenizer.decode(previous[at:at + 8]) if at < len(previous) else "(the end)"
            now = tokenizer.decode(current[at:at + 8]) if at < len(current) else "(the end)"
            raise DataError(f"the chat template of {model} is not prefix-preserving: adding turn {turn} "
                            f"({messages[turn]['role']}) re-renders the conversation before it differently from "
                            f"token {at}: {was!r} became {now!r}; multi-turn GRPO would train on a context the model "
                            "never sees. Give the model a tokenizer whose template renders every earlier turn as it "
                            "was (its tokenizer_config.json or chat_template.jinja)")
        previous = current
    return (f"chat template of {model}: prefix-preserving over {len(messages) - 2} turns with the environment's tools "
            "(what the model sampled is what the loss reads)")
