"""A scripted OpenAI-compatible chat endpoint for tests, benchmarks and offline demos (real HTTP, loopback).

    python -m agentrl.scripted_endpoint --port 8001 --mode agent --latency 0.05

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
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        if system.startswith("You grade"):
            return 200, self._completion(body, self._judge(first_user), None), {}
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
        from agentrl.metrics import normalize_answer

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
        return JSONResponse(payload, status_code=status, headers=headers)

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
