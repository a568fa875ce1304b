"""A scripted OpenAI-compatible chat endpoint for tests, benchmarks and offline demos (real HTTP, loopback).

    python tests/scripted_endpoint.py --port 8001 --mode agent --latency 0.05

It speaks ``POST /v1/chat/completions`` (tools, tool_calls, usage) and decides each reply from the
conversation, so no model is needed. The mode comes from ``--mode`` or from markers in the first user
message, which lets one server play many scripts at once:

- ``agent`` (default): search for the question, then answer with the title of the first passage found.
- ``[[mode:bad_json]]`` invalid JSON tool arguments, ``[[mode:unknown_tool]]`` a tool that does not exist,
  ``[[mode:text_tool_call]]`` the call as hermes text in ``content``, ``[[mode:no_tags]]`` an answer
  without tags, ``[[mode:empty]]`` an empty reply, ``[[mode:reasoning_only]]`` reasoning and no content,
  ``[[mode:long]]`` 200 kB of text cut off (finish ``length``), ``[[mode:answer:TEXT]]`` answer TEXT at once.
- A model name starting with ``missing`` gets 404 "model does not exist" (as vLLM answers an unknown model).
- ``[[fail:STATUS:N]]`` the first N requests of the conversation fail with STATUS (429, 500, 503, 400, ...).
- ``[[slow:SECONDS]]`` sleep before each reply; ``[[slow:SECONDS:N]]`` only before the first N requests of the
  conversation (a timeout burst: the client gives up on those, its retries are answered at once).
- ``[[drop:N]]`` the first N requests of the conversation get a truncated reply and the connection is closed
  (the client sees a dropped connection, not an HTTP status).
- ``[[mode:reasoning_field]]`` like ``reasoning_only`` but the text is in ``reasoning`` (the field vLLM and
  OpenRouter use) instead of ``reasoning_content``.
- ``[[hostile:KIND]]`` a malformed or hostile reply from the catalogue ``HOSTILE`` (invalid bodies, shape
  variations, broken tool calls, echoed keys, ...); tool-call kinds misbehave on the first turn only, then
  the script answers ``<answer>Paris</answer>``; ``*_once`` body kinds only on the first request.
- ``[[call:NAME:ARGS]]`` call tool NAME with the JSON ARGS, then answer with the first line of its result (no
  answer when it is an error); a task writer (a system prompt starting with "You write tasks", agentrl mcp-tasks)
  gets one such task per tool listed after "Tools:" and a line that is not JSON.
- Judge requests (a system prompt starting with "You grade"): CORRECT when the normalised prediction
  equals a gold answer; ``[[judge:empty]]`` / ``[[judge:garbage]]`` / ``[[judge:hedge]]`` (a sentence
  containing CORRECT) / ``[[judge:empty:N]]`` in the prediction script empty or unparseable replies (the
  first N times, or always); ``--judge empty`` makes every judge reply empty.

Every request body is recorded (the last 2,000): ``GET /v1/_requests?contains=TEXT`` returns the bodies whose
first user message contains TEXT, so a test can check what a client actually sent (e.g. ``extra_body`` keys).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections import defaultdict, deque

_MARK = re.compile(r"\[\[(\w+)(?::([^\]]*))?\]\]")


def _first_user(messages: list[dict]):
    """The content of the first user message ("" when there is none): it carries the script markers."""
    return next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")


def _markers(text: str) -> dict[str, str]:
    return {m.group(1): (m.group(2) or "") for m in _MARK.finditer(text or "")}


def _clean(text: str) -> str:
    return " ".join(_MARK.sub(" ", text or "").split())


class Script:
    """The reply logic, separate from HTTP so it is easy to read."""

    def __init__(self, mode: str = "agent", latency: float = 0.0, api_key: str | None = None, judge: str = "normal"):
        self.mode, self.latency, self.api_key, self.judge = mode, latency, api_key, judge
        self.attempts: dict[str, int] = defaultdict(int)
        self.requests = 0
        self.bodies: deque[dict] = deque(maxlen=2000)  # bounded: benchmarks send hundreds of thousands

    async def reply(self, body: dict, auth: str | None) -> tuple[int, dict, dict]:
        """Return ``(status, json_body, headers)`` for one chat-completions request."""
        self.requests += 1
        self.bodies.append(body)
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}}, {}
        model = str(body.get("model") or "")
        if model.startswith("missing"):
            return 404, {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                                   "code": 404}}, {}
        messages = body.get("messages") or []
        first_user = _first_user(messages)
        marks = _markers(first_user)
        if "drop" in marks and self._first_n("drop:" + first_user, marks["drop"]):
            return 0, {}, {}  # status 0: the HTTP layer drops the connection
        if "slow" in marks:
            seconds, _, n = marks["slow"].partition(":")
            if not n or self._first_n("slow:" + first_user, n):
                await asyncio.sleep(float(seconds or 1))
            elif self.latency:
                await asyncio.sleep(self.latency)
        elif self.latency:
            await asyncio.sleep(self.latency)
        if "fail" in marks:
            status, _, n = marks["fail"].partition(":")
            key = "fail:" + first_user
            self.attempts[key] += 1
            if self.attempts[key] <= int(n or 1):
                return int(status), {"error": {"message": f"scripted {status}"}}, {"retry-after": "0"}
        if "hostile" in marks:
            key = "hostile:" + first_user
            self.attempts[key] += 1
            return hostile_reply(marks["hostile"], self.attempts[key], messages, auth)
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        if system.startswith("You grade"):
            return 200, self._completion(body, self._judge(first_user), None), {}
        if system.startswith("You write tasks"):
            return 200, self._completion(body, _write_tasks(system), None), {}
        if "call" in marks:
            content, calls = _call_then_answer(marks["call"], messages)
            return 200, self._completion(body, content, calls, "tool_calls" if calls else "stop"), {}
        mode = marks.get("mode", self.mode)
        content, calls, finish, reasoning = self._agent(mode, messages, _clean(first_user))
        return 200, self._completion(body, content, calls, finish, reasoning), {}

    def _first_n(self, key: str, n: str) -> bool:
        """Count a request under ``key``; return True while the count is at most ``n`` (default 1)."""
        self.attempts[key] += 1
        return self.attempts[key] <= int(n or 1)

    def recorded(self, contains: str = "") -> list[dict]:
        """Return the recorded request bodies whose first user message contains ``contains``."""
        return [body for body in list(self.bodies) if contains in str(_first_user(body.get("messages") or []))]

    def _agent(self, mode: str, messages: list[dict], question: str):
        tool_msgs = [m for m in messages if m.get("role") == "tool"]
        if mode.startswith("answer:"):
            return f"<answer>{mode.partition(':')[2]}</answer>", None, "stop", None
        if mode == "empty":
            return "", None, "stop", None
        if mode == "reasoning_only":
            return None, None, "stop", "I am still thinking about " + question
        if mode == "reasoning_field":
            return None, None, "stop", {"reasoning": "Thinking (reasoning field) about " + question}
        if mode == "no_tags":
            return "I think the answer is probably unknown.", None, "stop", None
        if mode == "long":
            return "blah " * 40_000, None, "length", None
        if not tool_msgs:
            if mode == "bad_json":
                return "", [_call("search", '{"query": "unterminated')], "tool_calls", None
            if mode == "unknown_tool":
                return "", [_call("lookup", json.dumps({"query": question}))], "tool_calls", None
            if mode == "text_tool_call":
                call = json.dumps({"name": "search", "arguments": {"query": question}})
                return f"<tool_call>\n{call}\n</tool_call>", None, "stop", None
            return "", [_call("search", json.dumps({"query": question}))], "tool_calls", None
        m = re.search(r"\(Title: (.*?)\) ", tool_msgs[-1].get("content") or "")
        answer = m.group(1) if m else "unknown"
        return f"Based on the passages: <answer>{answer}</answer>", None, "stop", None

    def _judge(self, prompt: str) -> str:
        from agentrl.core.metrics import normalize_answer

        marks = _markers(prompt)
        if self.judge != "normal":  # the whole server misbehaves as a judge (--judge empty|garbage)
            marks.setdefault("judge", self.judge)
        if "judge" in marks:
            kind, _, n = marks["judge"].partition(":")
            key = "judge:" + prompt
            self.attempts[key] += 1
            if not n or self.attempts[key] <= int(n):
                if kind == "hedge":  # names a verdict word without being a verdict
                    return "The predicted answer is not CORRECT."
                return "" if kind == "empty" else "Let me think step by step about whether this matches..."
        gold = re.search(r"Gold answers?: (.*)", prompt)
        pred = re.search(r"Predicted answer: (.*)", prompt)
        golds = [normalize_answer(g) for g in json.loads(gold.group(1))] if gold else []
        ok = pred is not None and normalize_answer(_clean(pred.group(1))) in golds
        return "CORRECT" if ok else "INCORRECT"

    def _completion(self, body: dict, content, calls, finish: str = "stop", reasoning: str | None = None) -> dict:
        prompt_chars = sum(len(json.dumps(m)) for m in body.get("messages") or [])
        completion_chars = len(content or "") + sum(len(c["function"]["arguments"]) for c in calls or [])
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        if isinstance(reasoning, dict):  # the field name chosen by the script, e.g. {"reasoning": ...}
            message.update(reasoning)
        elif reasoning:
            message["reasoning_content"] = reasoning
        return {
            "id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": completion_chars // 4,
                      "total_tokens": (prompt_chars + completion_chars) // 4},
        }


def _write_tasks(system: str) -> str:
    """A task writer (agentrl mcp-tasks): for each tool in the JSON after "Tools:", a task whose question carries
    ``[[call:NAME:ARGS]]`` (required arguments filled: strings "missing", numbers 1, booleans true), then one line
    that is not JSON."""
    tools = json.loads(system.split("Tools:\n", 1)[1])
    fill = {"string": "missing", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    lines = []
    for tool in tools:
        params = tool.get("parameters") or {}
        args = {k: fill.get(params["properties"][k].get("type"), "missing") for k in params.get("required") or []}
        lines.append(json.dumps({"question": f"[[call:{tool['name']}:{json.dumps(args)}]] What does {tool['name']} "
                                             "say?"}))
    return "\n".join([*lines, "and that is all"])


def _call_then_answer(spec: str, messages: list[dict]):
    """``[[call:NAME:ARGS]]``: call NAME with ARGS, then answer with the first line of its result (no answer when the
    result is an error)."""
    name, _, args = spec.partition(":")
    tool_msgs = [m for m in messages if m.get("role") == "tool"]
    if not tool_msgs:
        return "", [_call(name, args or "{}")]
    result = (tool_msgs[-1].get("content") or "").strip()
    if not result or result.startswith("Error"):
        return "The tool failed, so I cannot tell.", None
    return f"<answer>{result.splitlines()[0]}</answer>", None


def _reply(message: dict | None = None, *, usage="default", finish="stop", choice_extra: dict | None = None) -> dict:
    choice = {"index": 0, "message": message if message is not None else {"role": "assistant", "content": ""},
              "finish_reason": finish, **(choice_extra or {})}
    body = {"id": "chatcmpl-h", "object": "chat.completion", "created": 0, "model": "scripted", "choices": [choice]}
    if usage != "absent":
        body["usage"] = {"prompt_tokens": 10, "completion_tokens": 5} if usage == "default" else usage
    return body


_ANSWER = "<answer>Paris</answer>"


def _answer(**kw) -> dict:
    return _reply({"role": "assistant", "content": _ANSWER}, **kw)


def _calls(*calls) -> dict:
    return _reply({"role": "assistant", "content": "", "tool_calls": list(calls)}, finish="tool_calls")


def _fn(name, arguments, call_id="call_h") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


_DEEP = '{"query": ' + "[" * 40_000 + "]" * 40_000 + "}"


def _raw_calls(arguments_json: str, content: str = "") -> bytes:
    """A tool-call reply body whose arguments are the raw JSON ``arguments_json`` (an object too deep for
    json.dumps to write: the body is assembled as text)."""
    body = json.dumps(_calls(_fn("search", "@ARGS@")))
    return body.replace('"@ARGS@"', arguments_json).encode()


def _nested(depth: int) -> dict:
    value: object = "Paris"
    for _ in range(depth):
        value = [value]
    return {"query": value}
# kind -> (what the first request gets, what it is for). Values: bytes (a raw 200 body), (status, bytes),
# a dict (a JSON body), or a callable(api_key) returning one of those. Kinds ending in "_once" misbehave on the
# first request only; tool-call kinds on the first turn only.
HOSTILE = {
    # bodies that are no chat completion: retried, then recorded as malformed_reply
    "truncated_json": b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "<ans',
    "empty_body": b"",
    "html_body": b"<html><body>502 Bad Gateway</body></html>",
    "plain_text": b"OK",
    "json_null": b"null",
    "json_array": b"[]",
    "json_string": b'"hello"',
    "json_number": b"42",
    "invalid_utf8": b'\xff\xfe{"choices": []}',
    "nan_choices": b'{"choices": NaN}',
    "no_choices": {"id": "x", "object": "chat.completion"},
    "empty_choices": {"id": "x", "choices": []},
    "null_choices": {"choices": None},
    "string_choices": {"choices": "abc"},
    "choice_not_object": {"choices": [1]},
    "message_null": {"choices": [{"index": 0, "message": None}]},
    "message_string": {"choices": [{"index": 0, "message": "<answer>Paris</answer>"}]},
    "error_object_200": {"error": {"message": "overloaded", "type": "server_error"}},
    # transient: the retry gets a good reply
    "truncated_json_once": b'{"choices": [',
    "empty_body_once": b"",
    "html_body_once": b"<html>504</html>",
    # shape variations with a usable answer: kept
    "content_parts": _reply({"role": "assistant", "content": [{"type": "text", "text": _ANSWER}]}),
    "content_parts_split": _reply({"role": "assistant", "content": [{"type": "text", "text": "<answer>Par"},
                                                                    {"type": "text", "text": "is</answer>"}]}),
    "content_string_parts": _reply({"role": "assistant", "content": ["<answer>", "Paris</answer>"]}),
    "content_parts_with_image": _reply({"role": "assistant", "content": [{"type": "image_url", "image_url": {}},
                                                                         {"type": "text", "text": _ANSWER}]}),
    "usage_strings": _answer(usage={"prompt_tokens": "12", "completion_tokens": "3"}),
    "usage_floats": _answer(usage={"prompt_tokens": 12.5, "completion_tokens": 3.0}),
    "usage_negative": _answer(usage={"prompt_tokens": -1, "completion_tokens": -5}),
    "usage_null": _answer(usage=None),
    "usage_list": _answer(usage=[1, 2]),
    "usage_string": _answer(usage="lots"),
    "usage_bools": _answer(usage={"prompt_tokens": True, "completion_tokens": False}),
    "usage_nested": _answer(usage={"prompt_tokens": {"n": 1}, "completion_tokens": [3]}),
    "usage_absent": _answer(usage="absent"),
    "finish_reason_number": _answer(finish=3),
    "finish_reason_null": _answer(finish=None),
    "finish_reason_object": _answer(finish={"type": "stop"}),
    "reasoning_parts": _reply({"role": "assistant", "content": _ANSWER,
                               "reasoning_content": [{"type": "text", "text": "thinking"}]}),
    "reasoning_number": _reply({"role": "assistant", "content": _ANSWER, "reasoning": 7}),
    "extra_fields": _reply({"role": "assistant", "content": _ANSWER, "audio": None, "x-vendor": {"a": [1]}},
                           choice_extra={"logprobs": {"content": []}, "stop_reason": 2}),
    "completions_style": {"choices": [{"index": 0, "text": _ANSWER, "finish_reason": "stop"}]},
    "role_missing": _reply({"content": _ANSWER}),
    "lone_surrogate": _reply({"role": "assistant", "content": "<answer>Paris</answer> \ud800 \udfff"}),
    "lone_surrogate_reasoning": _reply({"role": "assistant", "content": _ANSWER, "reasoning_content": "\udc80"}),
    "nul_bytes": _reply({"role": "assistant", "content": "\u0000<answer>Paris</answer>\u0000"}),
    "huge_content": _reply({"role": "assistant", "content": "x" * 1_000_000 + _ANSWER}),
    "unicode_mix": _reply({"role": "assistant", "content": "\u202e\U0001f600 <answer>Paris</answer> \ufeff"}),
    "answer_twice": _reply({"role": "assistant", "content": "<answer>Lyon</answer> no: <answer>Paris</answer>"}),
    "content_number": _reply({"role": "assistant", "content": 42}),
    "content_object": _reply({"role": "assistant", "content": {"answer": "Paris"}}),
    "echo_key": lambda key: _reply({"role": "assistant", "content": f"your key is {key} <answer>Paris</answer>"}),
    "echo_key_in_reasoning": lambda key: _reply({"role": "assistant", "content": _ANSWER,
                                                 "reasoning_content": f"auth was Bearer {key}"}),
    "echo_key_in_tool_args": lambda key: _calls(_fn("search", json.dumps({"query": f"Paris {key}"}))),
    "echo_key_in_tool_name": lambda key: _calls(_fn(f"search_{key}", "{}")),
    # broken tool calls: each comes back to the model as a tool error, then the script answers
    "tool_calls_null": _reply({"role": "assistant", "content": _ANSWER, "tool_calls": None}),
    "tool_calls_string": _reply({"role": "assistant", "content": _ANSWER, "tool_calls": "search"}),
    "tool_call_not_object": _calls(1),
    "tool_call_no_function": _calls({"id": "c1", "type": "function"}),
    "function_not_object": _calls({"id": "c1", "type": "function", "function": "search"}),
    "function_name_null": _calls(_fn(None, '{"query": "Paris"}')),
    "function_name_number": _calls(_fn(7, '{"query": "Paris"}')),
    "function_name_empty": _calls(_fn("", '{"query": "Paris"}')),
    "unknown_tool": _calls(_fn("lookup", '{"query": "Paris"}')),
    "arguments_object": _calls(_fn("search", {"query": "Paris capital"})),
    "arguments_null": _calls(_fn("search", None)),
    "arguments_number": _calls(_fn("search", 5)),
    "arguments_list": _calls(_fn("search", ["Paris"])),
    "arguments_invalid_json": _calls(_fn("search", '{"query": "Par')),
    "arguments_deeply_nested": _calls(_fn("search", _DEEP)),
    "arguments_oversized": _calls(_fn("search", json.dumps({"query": "Paris " * 40_000}))),
    "arguments_long_query": _calls(_fn("search", json.dumps({"query": "Paris " * 1_000}))),
    # the same as JSON objects instead of strings (vLLM and others send objects): too deep for json.loads, deeper
    # than the argument limit, and too large
    "arguments_object_deeply_nested": _raw_calls(_DEEP),
    "arguments_object_nested": _calls(_fn("search", _nested(200))),
    "arguments_object_oversized": _calls(_fn("search", {"query": "Paris " * 40_000})),
    "hermes_deeply_nested": _reply({"role": "assistant", "content": '<tool_call>{"name": "search", "arguments": '
                                    + _DEEP + "}</tool_call>"}),
    "arguments_extra_key": _calls(_fn("search", '{"query": "Paris", "limit": 3}')),
    "arguments_wrong_type": _calls(_fn("search", '{"query": 5}')),
    "query_empty": _calls(_fn("search", '{"query": "  "}')),
    "query_no_terms": _calls(_fn("search", '{"query": "the of and"}')),
    "query_punctuation": _calls(_fn("search", '{"query": "?!"}')),
    "query_nul": _calls(_fn("search", '{"query": "Paris\\u0000"}')),
    "many_calls": _calls(*[_fn("search", json.dumps({"query": f"Paris {i}"}), f"c{i}") for i in range(40)]),
    "duplicate_call_ids": _calls(_fn("search", '{"query": "Paris"}', "same"),
                                 _fn("search", '{"query": "Lyon"}', "same")),
    "call_id_missing": _calls({"type": "function", "function": {"name": "search", "arguments": '{"query": "Paris"}'}}),
    "hermes_broken": _reply({"role": "assistant", "content": "<tool_call>{not json</tool_call>"}),
    # HTTP statuses
    "status_400": (400, b'{"error": {"message": "bad request"}}'),
    "status_422": (422, b'{"error": {"message": "unprocessable"}}'),
    "status_500_always": (500, b'{"error": {"message": "boom"}}'),
    "status_503_html": (503, b"<html>Service Unavailable</html>"),
}


def hostile_reply(kind: str, attempt: int, messages: list[dict], api_key: str | None) -> tuple[int, object, dict]:
    """Return ``(status, body, headers)`` for a ``[[hostile:KIND]]`` conversation (body: dict or raw bytes)."""
    if kind not in HOSTILE:
        return 400, {"error": {"message": f"unknown hostile kind {kind!r}"}}, {}
    if any(m.get("role") == "tool" for m in messages) or (kind.endswith("_once") and attempt > 1):
        return 200, _answer(), {}
    spec = HOSTILE[kind]
    if callable(spec):
        spec = spec((api_key or "").removeprefix("Bearer "))
    status, body = spec if isinstance(spec, tuple) else (200, spec)
    return status, body, {"retry-after": "0"} if status >= 500 else {}


def _call(name: str, arguments: str) -> dict:
    _call.n = getattr(_call, "n", 0) + 1
    return {"id": f"call_{_call.n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def build_app(script: Script):
    """Return the Starlette app serving ``script``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    class DroppedConnection(Response):
        """Headers promising a body that never comes, then the server closes the connection."""

        async def __call__(self, scope, receive, send) -> None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")]})
            await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})
            # returning with the body incomplete makes uvicorn close the transport

    async def completions(request: Request):
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return JSONResponse({"error": {"message": "invalid JSON body"}}, status_code=400)
        status, payload, headers = await script.reply(body, request.headers.get("authorization"))
        if status == 0:
            return DroppedConnection()
        if isinstance(payload, bytes):
            return Response(payload, status_code=status, headers=headers, media_type="application/json")
        # allow_nan/ensure_ascii as json.dumps defaults: hostile bodies carry NaN and lone surrogates verbatim
        return Response(json.dumps(payload), status_code=status, headers=headers, media_type="application/json")

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def requests(request: Request):
        return JSONResponse({"data": script.recorded(request.query_params.get("contains", ""))})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"]),
                             Route("/v1/_requests", requests, methods=["GET"])])


def main(argv: list[str] | None = None) -> None:
    """Serve on 127.0.0.1 until interrupted."""
    import uvicorn

    ap = argparse.ArgumentParser(description="Scripted OpenAI-compatible endpoint (tests and benchmarks).")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--mode", default="agent")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    ap.add_argument("--api-key", help="require this bearer key (401 otherwise)")
    ap.add_argument("--judge", choices=["normal", "empty", "garbage"], default="normal",
                    help="how judge requests are answered")
    args = ap.parse_args(argv)
    app = build_app(Script(args.mode, args.latency, args.api_key, args.judge))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
