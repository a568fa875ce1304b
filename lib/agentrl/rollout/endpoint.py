"""An OpenAI-compatible chat endpoint as a policy (vLLM, SGLang, Ollama, OpenRouter, OpenAI, ...).

Base URL, key and model come from arguments, then ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, then a ``.env``
file in the working directory. Retries are ours (the client's are off): 429, 5xx, timeouts and connection
errors back off exponentially with full jitter (honouring ``Retry-After``), up to ``max_retries``; other
errors fail the call at once. The key is kept out of ``describe()``, so it never reaches a manifest.

Two transports send the same request and hand the same bytes to the same parsing and retry code:
``aiohttp`` (default) posts the JSON body on one aiohttp session per event loop; ``openai`` goes through
``AsyncOpenAI.post()``. Both raise the openai SDK's exception types, so retries, fatal errors and error kinds
do not depend on the transport. The SDK's request building (URL parsing, header merging, option models)
cost ~1 ms of CPU per call, which held the harness benchmark to ~55 % of a bare client (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from agentrl.core.chat import Turn, arguments_text, parse_hermes
from agentrl.core.io import DataError, loads
from agentrl.core.validate import AtLeast0, AtLeast1, NonNegative, Positive, between
from agentrl.envs.base import api_tools


@dataclass
class EndpointConfig:
    """How to reach and sample from an OpenAI-compatible endpoint."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None  # prefer OPENAI_API_KEY or .env: flags end up in shell history
    temperature: between(0, 2) | None = 0.0  # OpenAI's range
    top_p: between(0, 1, low_open=True) | None = None
    # tokens a turn may generate: the environment's evaluation budget when it evaluates (agentrl.rollout.evaluate)
    max_tokens: AtLeast1 = field(default=1024, metadata={"moved": "[eval.<env>] max_new_tokens (the environment's "
                                                                  "evaluation budget: every evaluation reads it)"})
    extra_body: dict = field(default_factory=dict)  # e.g. {"chat_template_kwargs": {"enable_thinking": false}}
    request_timeout: Positive = 120.0
    max_retries: AtLeast0 = 5
    backoff_base: NonNegative = 0.5
    backoff_max: NonNegative = 30.0
    transport: Literal["aiohttp", "openai"] = "aiohttp"  # a thin chat-completions client, or the openai SDK's


TRANSPORTS = ("aiohttp", "openai")


class FatalEndpointError(RuntimeError):
    """An error no retry can fix (bad key, unknown model, malformed request): the run should stop."""


class MalformedReplyError(RuntimeError):
    """The endpoint answered 200 with a body that is no usable chat completion (invalid JSON after the
    retries, no choices, a non-object message)."""


def fatal_api_errors() -> tuple[type[Exception], ...]:
    """Return the openai exceptions that mean the endpoint refuses the run (401, 403, 404): no retry or
    fallback can fix a wrong key or model, so the policy and the judge turn them into FatalEndpointError."""
    import openai

    return openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError


def load_dotenv(path: str | Path = ".env") -> dict[str, str]:
    """Return KEY=VALUE pairs from a .env file (missing file: {}); quotes are stripped, comments skipped."""
    path = Path(path)
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def resolve_settings(cfg: EndpointConfig) -> tuple[str, str, str]:
    """Return ``(base_url, api_key, model)`` from the config, the environment and .env, in that order."""
    dotenv = load_dotenv()
    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or dotenv.get("OPENAI_BASE_URL")
    api_key = cfg.api_key or os.environ.get("OPENAI_API_KEY") or dotenv.get("OPENAI_API_KEY") or "EMPTY"
    model = cfg.model or os.environ.get("OPENAI_MODEL") or dotenv.get("OPENAI_MODEL")
    if not base_url:
        raise DataError("no endpoint: pass --base-url or set OPENAI_BASE_URL (environment or .env)")
    if not model:
        raise DataError("no model: pass --model or set OPENAI_MODEL (environment or .env)")
    return base_url, api_key, model


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Return the wait before retry ``attempt`` (0-based): full jitter on ``base * 2**attempt``, capped at ``cap``.

    A ``Retry-After`` longer than the backoff is honoured (still capped); a shorter one, including 0, does not
    cut the wait below the backoff's floor (half the exponential delay, jittered up to all of it), so a server
    answering ``Retry-After: 0`` under load still sees growing, spread-out gaps instead of every worker
    retrying at once.
    """
    window = min(cap, base * 2 ** attempt)
    if retry_after is not None and retry_after >= 0:
        return min(max(retry_after, random.uniform(window / 2, window)), cap)
    return random.uniform(0, window)


class EndpointPolicy:
    """Generate assistant turns through ``chat.completions`` with tools."""

    kind = "endpoint"

    def __init__(self, cfg: EndpointConfig):
        self.cfg = cfg
        if cfg.transport not in TRANSPORTS:
            raise DataError(f"unknown endpoint transport '{cfg.transport}' ({', '.join(TRANSPORTS)})")
        self.base_url, self._api_key, self.model = resolve_settings(cfg)
        self._transports: dict[int, AiohttpTransport | OpenAITransport] = {}

    def _transport(self):
        """The transport of the running event loop (an HTTP connection pool belongs to one loop)."""
        loop = asyncio.get_running_loop()
        transport = self._transports.get(id(loop))
        if transport is None:
            cls = AiohttpTransport if self.cfg.transport == "aiohttp" else OpenAITransport
            transport = self._transports[id(loop)] = cls(self.base_url, self._api_key, self.cfg.request_timeout)
        return transport

    @property
    def secrets(self) -> tuple[str, ...]:
        """Strings that must never be written anywhere (scrubbed from manifests and error texts)."""
        return (self._api_key,) if self._api_key not in ("EMPTY", "") else ()

    def describe(self) -> dict:
        """Return the policy settings for a manifest (no key)."""
        return {"kind": self.kind, "base_url": self.base_url, "model": self.model, "temperature": self.cfg.temperature,
                "top_p": self.cfg.top_p, "max_tokens": self.cfg.max_tokens, "extra_body": self.cfg.extra_body,
                "max_retries": self.cfg.max_retries, "transport": self.cfg.transport}

    async def generate(self, messages: list[dict], tools: list[dict], row: dict | None = None) -> Turn:
        """Return the next assistant turn, retrying transient errors; raise after the last retry."""
        import openai

        request = {"model": self.model, "messages": [_wire_message(m) for m in messages],
                   "max_tokens": self.cfg.max_tokens}
        if tools:
            request["tools"] = api_tools(tools)
        for key in ("temperature", "top_p"):
            if getattr(self.cfg, key) is not None:
                request[key] = getattr(self.cfg, key)
        request.update(self.cfg.extra_body)
        transport = self._transport()
        attempt = 0
        while True:
            start = time.perf_counter()
            try:
                body = parse_body(await transport.post(request))
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                    openai.APIConnectionError, ValueError) as exc:
                # ValueError: a truncated or invalid JSON body (JSONDecodeError, bad UTF-8) is a transient
                # server fault like a 5xx: retried with the same backoff, then recorded
                if attempt >= self.cfg.max_retries:
                    if isinstance(exc, ValueError):
                        raise MalformedReplyError(f"invalid JSON body after {attempt + 1} attempts: "
                                                  f"{type(exc).__name__}: {str(exc)[:200]}") from None
                    raise
                await asyncio.sleep(backoff_delay(attempt, self.cfg.backoff_base, self.cfg.backoff_max,
                                                  _retry_after(exc)))
                attempt += 1
                continue
            except fatal_api_errors() as exc:
                raise FatalEndpointError(f"{type(exc).__name__}: {exc}") from None
            return _turn_from_json(body, time.perf_counter() - start)

    async def aclose(self) -> None:
        """Close the transport of the running event loop."""
        transport = self._transports.pop(id(asyncio.get_running_loop()), None)
        if transport is not None:
            await transport.aclose()


class OpenAITransport:
    """``POST /chat/completions`` through the openai SDK (``AsyncOpenAI.post`` on its aiohttp client)."""

    def __init__(self, base_url: str, api_key: str, timeout: float):
        from openai import AsyncOpenAI, DefaultAioHttpClient

        # post() with a plain JSON body and the raw response: chat.completions.create() walks every message
        # through the SDK's typed-dict transform and builds pydantic models for the reply (~3 ms per call);
        # the aiohttp client because httpx's pool scans every connection per request
        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
                                  http_client=DefaultAioHttpClient(timeout=timeout))

    async def post(self, request: dict) -> bytes:
        """Return the body of a 2xx reply to ``request``; raise the SDK's error for any other outcome."""
        import httpx2

        resp = await self.client.post("/chat/completions", body=request, cast_to=httpx2.Response)
        return resp.content

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool."""
        await self.client.close()


class AiohttpTransport:
    """``POST /chat/completions`` as one aiohttp request: a JSON body and a bearer key, nothing else.

    Non-2xx statuses, timeouts and connection failures raise the openai SDK's exception types (built from the
    reply as the SDK builds them, see :func:`status_error`), so the policy's retry and fatal-error handling and
    the runner's error kinds are the same for both transports.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                        "Accept": "application/json"}
        self.timeout = timeout
        self._session = None

    def _open(self):
        import aiohttp

        # limit=0: the runner's concurrency is the bound; aiohttp's default 100 would queue requests 101+
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def post(self, request: dict) -> bytes:
        """Return the body of a 2xx reply to ``request``; raise the SDK's error for any other outcome."""
        import aiohttp
        import openai

        session = self._session or self._open()
        try:
            async with session.post(self.url, data=request_body(request), headers=self.headers) as resp:
                body = await resp.read()
                status, headers = resp.status, resp.headers
        except TimeoutError:
            raise openai.APITimeoutError(request=_sdk_request(self.url)) from None
        except aiohttp.ClientError as exc:
            raise openai.APIConnectionError(message=f"Connection error: {type(exc).__name__}: {exc}",
                                            request=_sdk_request(self.url)) from None
        if 200 <= status < 300:
            return body
        raise status_error(status, headers, body, self.url)

    async def aclose(self) -> None:
        """Close the session and its connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def request_body(request: dict) -> bytes:
    """Return the UTF-8 JSON body of a chat-completions ``request``.

    msgspec (~10x faster than ``json.dumps`` on a request carrying passages); a request it refuses (a lone
    surrogate a model produced, which UTF-8 cannot hold) is encoded by ``json.dumps`` with ``ensure_ascii``,
    which escapes it."""
    try:
        return _ENCODER.encode(request)
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return json.dumps(request).encode()


_ENCODER = msgspec.json.Encoder()


def _sdk_request(url: str):
    import httpx2

    return httpx2.Request("POST", url)


def status_error(status: int, headers, body: bytes, url: str) -> Exception:
    """Return the openai SDK exception the SDK raises for an HTTP ``status`` reply with ``body`` (the class per
    status, "Error code: N - message" as the text, the parsed error as ``body``, headers kept for Retry-After)."""
    import httpx2
    import openai

    response = httpx2.Response(status, headers=list(headers.items()), content=body, request=_sdk_request(url))
    message = f"Error code: {status}"
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = text
    else:
        error = data.get("error", data) if isinstance(data, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
        data = error if isinstance(data, dict) else data
    by_status = {400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
                 404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
                 429: openai.RateLimitError}
    cls = by_status.get(status) or (openai.InternalServerError if status >= 500 else openai.APIStatusError)
    return cls(message, response=response, body=data)


# json.loads raises RecursionError (not ValueError) on nesting near the interpreter's recursion limit; a body that
# does is parsed again with everything below this depth replaced by a note (a chat completion needs ~10 levels).
MAX_BODY_DEPTH = 100
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def parse_body(raw: bytes | str):
    """Return the JSON value of a reply body; raise ValueError when it is not JSON. Lists and objects nested
    deeper than ``MAX_BODY_DEPTH`` are replaced by the string ``"(nested deeper than 100 levels)"``, so a hostile
    body reaches the reply checks (and its tool calls the tools, as errors) instead of failing the item."""
    try:
        return loads(raw)  # msgspec first, json.loads for what it refuses
    except RecursionError:
        pass
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw  # it decoded once already
    note = json.dumps(f"(nested deeper than {MAX_BODY_DEPTH} levels)")
    out, kept, depth, cut = [], 0, 0, None
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if depth == MAX_BODY_DEPTH + 1:
                cut = m.start()
        else:
            if depth == MAX_BODY_DEPTH + 1 and cut is not None:
                out += [text[kept:cut], note]
                kept, cut = m.end(), None
            depth -= 1
    try:
        return json.loads("".join(out) + text[kept:])
    except RecursionError:  # unbalanced brackets left it deep: no JSON reply
        raise ValueError(f"JSON nested deeper than {MAX_BODY_DEPTH} levels") from None


def _retry_after(exc) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after"))
    except (TypeError, ValueError):
        return None


def _wire_message(m: dict) -> dict:
    """The message as the API expects it: our extra keys (reasoning) stay in the trajectory only."""
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": tc["id"], "type": "function",
                              "function": {"name": tc["function"]["name"] or "",
                                           "arguments": tc["function"]["arguments"]}}
                             for tc in m["tool_calls"]]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id", "")
        if m.get("name"):
            out["name"] = m["name"]
    return out


def _text(value) -> str:
    """Return message content as text: a string, a list of parts (``{"type": "text", "text": ...}`` or plain
    strings, as some servers send), or None; other JSON values are rendered as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:  # parsed near the recursion limit, serialised from deeper in the stack
        return ""


def _count(value) -> int | None:
    """Return a token count as a non-negative int, or None for anything that is not one ("12" is 12)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value == value and value not in (float("inf"), float("-inf")):
        return int(value) if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _turn_from_json(resp, latency: float) -> Turn:
    """Return the Turn of a chat-completions JSON reply (reasoning read from ``reasoning`` or
    ``reasoning_content``; hermes tool calls in ``content`` parsed when the server has no tool parser).

    Shape variations are normalised so a usable answer is kept (content as a list of parts, usage counts as
    strings or floats, tool-call arguments as objects); a reply without a usable message raises
    MalformedReplyError. A tool call without a function name comes back to the model as an invalid call."""
    if not isinstance(resp, dict):
        raise MalformedReplyError(f"the reply is a JSON {type(resp).__name__}, not an object: {str(resp)[:200]}")
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        detail = resp.get("error") if isinstance(resp.get("error"), dict | str) else str(resp)[:200]
        raise MalformedReplyError(f"the reply has no choices: {str(detail)[:200]}")
    choice = choices[0]
    msg = choice.get("message")
    if msg is None and isinstance(choice.get("text"), str):  # a completions-style reply
        msg = {"content": choice["text"]}
    if not isinstance(msg, dict):
        raise MalformedReplyError(f"choices[0].message is {type(msg).__name__}, not an object")
    content = _text(msg.get("content"))
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    reasoning = _text(reasoning) or None
    calls = []
    raw_calls = msg.get("tool_calls")
    for i, tc in enumerate(raw_calls if isinstance(raw_calls, list) else []):
        tc = tc if isinstance(tc, dict) else {}
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) and fn.get("name") else None
        args = arguments_text(fn.get("arguments"))  # an object (some servers) serialised, unless nested too deep
        call_id = tc.get("id") if isinstance(tc.get("id"), str) and tc.get("id") else f"call_{i}"
        calls.append({"id": call_id, "name": name, "arguments": args if name else (args or json.dumps(tc)[:1000])})
    if not calls and "<tool_call>" in content:
        content, calls, think = parse_hermes(content)
        reasoning = reasoning or think
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    finish = choice.get("finish_reason")
    return Turn(content=content, tool_calls=calls, reasoning=reasoning,
                finish_reason=finish if isinstance(finish, str) else None,
                prompt_tokens=_count(usage.get("prompt_tokens")),
                completion_tokens=_count(usage.get("completion_tokens")), latency_s=latency)
