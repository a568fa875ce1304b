"""A fast path in front of the MCP server for the one call that carries its load: a well-formed ``search``.

The MCP SDK answers a ``tools/call`` through ~20 layers (Starlette middleware, a per-request dispatch context,
the server runner, the tool manager, argument models, a result model that is dumped, re-validated per protocol
version and dumped again): ~0.9 ms of CPU per call on this machine, more than the search itself. This ASGI
wrapper answers the common case directly: a POST of protocol 2026-07-28 (one self-contained request, no session)
whose routing headers, envelope and params pass the SDK's own checks (``classify_inbound_request``,
``validate_client_request``, the transport-security rules), whose arguments are exactly a query string and an
optional integer top_k within the server's limits. It runs the same batched search and writes the reply the
SDK would write, byte for byte (tests/test_mcp.py compares the two on every request shape). Everything else —
other methods, other protocol versions, malformed or unusual requests, refused arguments, a failing search — is
handed to the SDK unchanged, with the body replayed, so errors keep the SDK's exact form.
"""

from __future__ import annotations

import json
from collections.abc import Callable

_ROUTING = {b"mcp-protocol-version": "2026-07-28", b"mcp-method": "tools/call", b"mcp-name": "search"}
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_ARGUMENT_KEYS = frozenset({"query", "top_k"})
RESULT_CACHE = 4096  # encoded results kept (~3 KB each at top_k 5: ~12 MB)


class SearchFastPath:
    """ASGI app: answer well-formed ``tools/call search`` POSTs at ``path`` itself, pass everything else to
    ``app`` (the SDK's streamable-HTTP app built with the same ``security`` settings and body limit)."""

    def __init__(self, app, search: Callable, passage: type, *, path: str, server_info: dict, security,
                 max_body: int, max_top_k: int, max_query_chars: int, default_top_k: int = 5):
        self.app, self.search, self.passage, self.path = app, search, passage, path
        self.server_info, self.security, self.max_body = server_info, security, max_body
        self.max_top_k, self.max_query_chars, self.default_top_k = max_top_k, max_query_chars, default_top_k
        self.answered = 0  # calls answered here (the rest went to the SDK): for tests and benchmarks
        self._results: dict[tuple, bytes] = {}  # encoded results by hit list (_reply)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path \
                or not self._headers_ok(scope["headers"]):
            await self.app(scope, receive, send)
            return
        body, messages = await _read_body(receive, self.max_body)
        call = self._parse(body, scope["headers"]) if body is not None else None
        hits = None
        if call is not None:
            try:
                hits = await self.search(call[1], call[2])
            except Exception:  # noqa: BLE001 - the SDK path runs it again and words the tool error its own way
                hits = None
        if hits is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        payload = self._reply(call[0], hits)
        self.answered += 1
        # the headers Starlette's Response writes for the SDK's reply (uvicorn adds date and server to both)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(payload)).encode()),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})

    def _headers_ok(self, headers: list[tuple[bytes, bytes]]) -> bool:
        seen: dict[bytes, str] = {}
        content_type = accept = host = origin = None
        for raw_name, raw_value in headers:
            name, value = raw_name.lower(), raw_value.decode("latin-1")
            if name in _ROUTING:
                if name in seen:  # a duplicated routing header is the SDK's to reject
                    return False
                seen[name] = value
            elif name.startswith(b"mcp-"):  # Mcp-Param-* or anything else the SDK would look at
                return False
            elif name == b"content-type":
                content_type = value
            elif name == b"accept":
                accept = value
            elif name == b"host":
                host = value
            elif name == b"origin":
                origin = value
        if any(seen.get(k) != v for k, v in _ROUTING.items()):
            return False
        if content_type is None or not content_type.lower().startswith("application/json"):
            return False
        types = {t.strip().split(";")[0].strip().lower() for t in (accept or "").split(",")}
        if not types & {"application/json", "application/*", "*/*"}:
            return False
        sec = self.security
        if sec is not None and sec.enable_dns_rebinding_protection:
            return bool(host) and _allowed(host, sec.allowed_hosts) and (not origin
                                                                         or _allowed(origin, sec.allowed_origins))
        return True

    def _parse(self, body: bytes, headers) -> tuple | None:
        """Return ``(id, query, top_k)`` when the SDK would accept this call and run the search, else None."""
        from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
        from mcp_types import methods

        try:
            msg = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(msg, dict) or msg.keys() != _ENVELOPE_KEYS or msg["jsonrpc"] != "2.0" \
                or msg["method"] != "tools/call" or type(msg["id"]) not in (int, str):
            return None
        params = msg["params"]
        if not isinstance(params, dict) or not params.keys() <= _PARAM_KEYS or params.get("name") != "search":
            return None
        args = params.get("arguments")
        if not isinstance(args, dict) or not args.keys() <= _ARGUMENT_KEYS:
            return None
        query, top_k = args.get("query"), args.get("top_k", self.default_top_k)
        # exact types only: the SDK's argument model would coerce "5" or 5.0, and its reply is the reference
        if type(query) is not str or type(top_k) is not int or not query.strip() \
                or len(query) > self.max_query_chars or not 1 <= top_k <= self.max_top_k:
            return None
        folded = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
        if not isinstance(classify_inbound_request(msg, headers=folded), InboundModernRoute):
            return None
        try:
            methods.validate_client_request("tools/call", _ROUTING[b"mcp-protocol-version"], params)
        except Exception:  # noqa: BLE001 - whatever the SDK's validation refuses, the SDK answers
            return None
        return msg["id"], query, top_k

    def _reply(self, call_id, hits: list) -> bytes:
        """Return the SDK's reply bytes to call ``call_id`` with ``hits``: the result part is encoded once per distinct
        hit list (keyed by every field of every hit, so a reply is never another search's) and kept in a bounded
        cache, since a training run asks the same questions again and again; the envelope is written per call."""
        key = tuple((h.id, h.title, h.text, h.score) for h in hits)
        try:
            result = self._results.get(key)
        except TypeError:  # an unhashable field: encoded every time
            key, result = None, None
        if result is None:
            result = self._result(hits)
            if key is not None:
                if len(self._results) >= RESULT_CACHE:
                    self._results.pop(next(iter(self._results)))  # the oldest entry
                self._results[key] = result
        return b'{"jsonrpc":"2.0","id":' + json.dumps(call_id).encode() + b',"result":' + result + b"}"

    def _result(self, hits: list) -> bytes:
        """Return the JSON of the SDK's ``tools/call`` result for ``hits``, as the SDK builds it."""
        import pydantic_core

        passages = [self.passage(id=h.id, title=h.title, text=h.text, score=h.score) for h in hits]
        # the SDK's MCPServer: one indented-JSON text block per item, the structured result next to it
        content = [{"text": pydantic_core.to_json(p, fallback=str, indent=2).decode(), "type": "text"}
                   for p in passages]
        result = {"content": content, "isError": False, "resultType": "complete",
                  "structuredContent": {"result": [p.model_dump(mode="json", by_alias=True) for p in passages]},
                  "_meta": {"io.modelcontextprotocol/serverInfo": self.server_info}}
        return json.dumps(result, separators=(",", ":")).encode()


def _allowed(value: str, allowed: list[str]) -> bool:
    """The SDK's host / origin rule: an exact match, or ``base:*`` matching ``base:<anything>``."""
    return value in allowed or any(a.endswith(":*") and value.startswith(a[:-2] + ":") for a in allowed)


async def _read_body(receive, limit: int) -> tuple[bytes | None, list]:
    """Return the request body (None when over ``limit`` or the client went away) and the messages read."""
    messages, chunks, size = [], [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return None, messages
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None, messages
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), messages


def _replay(messages: list, receive):
    """Return a ``receive`` that hands back ``messages`` first, then reads on."""
    pending = list(messages)

    async def replayed():
        return pending.pop(0) if pending else await receive()

    return replayed
