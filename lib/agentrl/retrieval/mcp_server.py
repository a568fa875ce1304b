"""The retriever as an MCP tool server (mcp 2.x ``MCPServer``), over stdio or streamable HTTP on loopback.

Tool ``search(query, top_k=5)`` returns a list of ``{id, title, text, score}``. Concurrent calls are not
queued behind one another: requests that arrive while a search runs are collected and answered by one
batched search (one embedding forward pass for all their queries) in a worker thread, so the event loop
keeps accepting calls and throughput grows with concurrency.

    agentrl serve --index runs/corpus/hotpotqa/index --transport http --port 8765   # -> http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import os
import sys
import threading

from pydantic import BaseModel

from agentrl.core.io import DataError
from agentrl.retrieval import Retriever
from agentrl.retrieval.batcher import BatchSearcher
from agentrl.retrieval.mcp_fast import SearchFastPath


class Passage(BaseModel):
    """One search result as the tool returns it."""

    id: str
    title: str
    text: str
    score: float


# A question or a few keywords; a longer "query" is a runaway generation or an attack. Refused at once: without
# a cap one 1 MB query took ~2 s of tokenising and encoding, and distinct ones filled the query-vector cache.
MAX_QUERY_CHARS = 2000


def build_server(retriever, *, method: str | None = None, max_top_k: int = 50, name: str = "agentrl-retrieval",
                 max_query_chars: int = MAX_QUERY_CHARS, searcher: BatchSearcher | None = None):
    """Return an ``MCPServer`` exposing ``search(query, top_k)`` over ``retriever`` (through ``searcher``, a
    ``BatchSearcher`` made here when not given); queries longer than ``max_query_chars`` get a tool error at once."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    # WARNING, not the default INFO: INFO logs every refused call ("Tool 'search' failed: ..."), a line per bad
    # call that a flood of bad calls turns into a log flood (and a server blocked on a full stderr pipe)
    server = MCPServer(name=name, instructions="Search a passage corpus (hybrid BM25 + dense retrieval).",
                       log_level="WARNING")
    searcher = searcher or BatchSearcher(retriever, method)

    @server.tool()
    async def search(query: str, top_k: int = 5) -> list[Passage]:
        """Search the corpus and return the best-matching passages, best first.

        Args:
            query: What to look for, in natural language or keywords.
            top_k: How many passages to return (1 to the server's maximum).
        """
        if not query or not query.strip():
            raise ToolError("query must be a non-empty string")
        if len(query) > max_query_chars:
            raise ToolError(f"query too long: {len(query):,} characters (limit {max_query_chars:,})")
        if top_k < 1 or top_k > max_top_k:
            raise ToolError(f"top_k must be between 1 and {max_top_k} (got {top_k})")
        try:
            hits = await searcher.search(query, top_k)
        except DataError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a tool error for this call, not a traceback in the log
            raise ToolError(f"search failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        return [Passage(id=h.id, title=h.title, text=h.text, score=h.score) for h in hits]

    return server


def http_app(retriever, *, host: str = "127.0.0.1", method: str | None = None, max_top_k: int = 50,
             max_query_chars: int = MAX_QUERY_CHARS, fast_path: bool = True):
    """Return the ASGI app that serves MCP at ``/mcp`` over streamable HTTP: the SDK's app in stateless
    JSON-response mode, behind the search fast path (``agentrl.retrieval.mcp_fast``) unless ``fast_path`` is False."""
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
    from mcp_types import Implementation

    searcher = BatchSearcher(retriever, method)
    server = build_server(retriever, method=method, max_top_k=max_top_k, max_query_chars=max_query_chars,
                          searcher=searcher)
    security = None
    if host in ("127.0.0.1", "localhost", "::1"):  # the SDK's own default for loopback, spelt out to share it
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    # stateless + JSON responses: every POST is answered on its own with one JSON body, no session to create,
    # track or expire, for clients of the handshake protocols too (2026-07-28 clients are stateless anyway)
    app = server.streamable_http_app(json_response=True, stateless_http=True, transport_security=security,
                                     host=host, max_request_body_size=DEFAULT_MAX_REQUEST_BODY_SIZE)
    if not fast_path:
        return app
    info = Implementation(name=server.name, version=server.version, title=server.title,
                          description=server.description, website_url=server.website_url, icons=server.icons)
    return SearchFastPath(app, searcher.search, Passage, path="/mcp", security=security,
                          server_info=info.model_dump(by_alias=True, mode="json", exclude_none=True),
                          max_body=DEFAULT_MAX_REQUEST_BODY_SIZE, max_top_k=max_top_k,
                          max_query_chars=max_query_chars)


class Warming:
    """A retriever whose embedder loads in a background thread (from :meth:`begin`; at construction unless
    ``begin=False``): a search waits for it, every other request (initialize, tools/list) is answered at once. A
    warm-up that fails ends the process (exit 2) with its error, as a failure at start did: a server that cannot
    search serves nothing."""

    def __init__(self, retriever, method: str | None = None, begin: bool = True):
        self._retriever, self._ready, self._method, self._thread = retriever, threading.Event(), method, None
        if begin:
            self.begin()

    def begin(self) -> None:
        """Start loading the embedder in the background (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._warm, args=(self._method,), name="embedder-warm-up",
                                            daemon=True)
            self._thread.start()

    def _warm(self, method: str | None) -> None:
        try:
            self._retriever.search("warm up", 1, method)
        except Exception as exc:  # noqa: BLE001 - said, then the process ends
            print(f"agentrl serve: the retriever could not search ({type(exc).__name__}: {exc}); stopping",
                  file=sys.stderr, flush=True)
            os._exit(2)
        self._ready.set()

    def search_batch(self, *args, **kwargs):
        """Return ``search_batch``'s answer once the warm-up is done."""
        self._ready.wait()
        return self._retriever.search_batch(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._retriever, name)


def serve(index_dir: str, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          method: str | None = None, max_top_k: int = 50, distinct: bool | None = None,
          max_query_chars: int = MAX_QUERY_CHARS, fast_path: bool = True) -> None:
    """Load the index and serve until interrupted (blocks); the embedder warms up in the background (:class:`Warming`:
    a client's initialize and tools/list do not wait for it, its first search does), over HTTP from the moment the
    server listens (importing torch in a second thread while the first imports the server slowed the start by a
    second on 2 cores: docs/decisions.md).

    ``distinct`` overrides the index's setting: distinct documents (default) or raw chunks (False)."""
    http = transport in ("http", "streamable-http")
    if not http and transport != "stdio":
        raise DataError(f"unknown transport '{transport}' (stdio, http)")
    retriever = Warming(Retriever.load(index_dir, overrides={"distinct": distinct}), method, begin=not http)
    if not http:
        build_server(retriever, method=method, max_top_k=max_top_k, max_query_chars=max_query_chars).run("stdio")
        return
    import uvicorn

    app = http_app(retriever, host=host, method=method, max_top_k=max_top_k, max_query_chars=max_query_chars,
                   fast_path=fast_path)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            retriever.begin()  # listening: the embedder loads while the first requests are answered

    # uvicorn picks uvloop and httptools when installed (they are dependencies): the pure-Python h11 parser and
    # asyncio's loop cost more CPU per call than the search (docs/decisions.md)
    Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
