"""The retriever as an MCP tool server (mcp 2.x ``MCPServer``), over stdio or streamable HTTP on loopback.

Tool ``search(query, top_k=5)`` returns a list of ``{id, title, text, score}``. Concurrent calls are not
queued behind one another: requests that arrive while a search runs are collected and answered by one
batched search (one embedding forward pass for all their queries) in a worker thread, so the event loop
keeps accepting calls and throughput grows with concurrency.

    agentrl serve --index runs/corpus/hotpotqa/index --transport http --port 8765   # -> http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import asyncio
from collections import deque

from pydantic import BaseModel

from agentrl.io import DataError


class Passage(BaseModel):
    """One search result as the tool returns it."""

    id: str
    title: str
    text: str
    score: float


class BatchSearcher:
    """Answer concurrent search requests with batched retrieval calls in a worker thread."""

    def __init__(self, retriever, method: str | None = None, max_batch: int = 64):
        self.retriever, self.method, self.max_batch = retriever, method, max_batch
        self._pending: deque[tuple[str, int, asyncio.Future]] = deque()
        self._worker: asyncio.Task | None = None

    async def search(self, query: str, top_k: int) -> list[Passage]:
        """Return the top_k passages for ``query`` once the batch containing it has run."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((query, top_k, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]
            k = max(top_k for _, top_k, _ in batch)
            try:
                hits = await asyncio.to_thread(self.retriever.search_batch, [q for q, _, _ in batch], k, self.method)
            except Exception as exc:  # one bad batch must not strand the callers waiting on it
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, top_k, fut), row in zip(batch, hits, strict=True):
                if not fut.done():
                    fut.set_result([Passage(id=h.id, title=h.title, text=h.text, score=h.score) for h in row[:top_k]])


def build_server(retriever, *, method: str | None = None, max_top_k: int = 50, name: str = "agentrl-retrieval"):
    """Return an ``MCPServer`` exposing ``search(query, top_k)`` over ``retriever``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name=name, instructions="Search a passage corpus (hybrid BM25 + dense retrieval).")
    searcher = BatchSearcher(retriever, method)

    @server.tool()
    async def search(query: str, top_k: int = 5) -> list[Passage]:
        """Search the corpus and return the best-matching passages, best first.

        Args:
            query: What to look for, in natural language or keywords.
            top_k: How many passages to return (1 to the server's maximum).
        """
        if not query or not query.strip():
            raise ToolError("query must be a non-empty string")
        if top_k < 1 or top_k > max_top_k:
            raise ToolError(f"top_k must be between 1 and {max_top_k} (got {top_k})")
        try:
            return await searcher.search(query, top_k)
        except DataError as exc:
            raise ToolError(str(exc)) from None

    return server


def serve(index_dir: str, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          method: str | None = None, max_top_k: int = 50) -> None:
    """Load the index, warm the embedder up and serve until interrupted (blocks)."""
    from agentrl.retrieval import Retriever

    retriever = Retriever.load(index_dir)
    retriever.search("warm up", 1, method)  # load the embedder before the first client waits for it
    server = build_server(retriever, method=method, max_top_k=max_top_k)
    if transport == "stdio":
        server.run("stdio")
    elif transport in ("http", "streamable-http"):
        server.run("streamable-http", host=host, port=port, json_response=True)
    else:
        raise DataError(f"unknown transport '{transport}' (stdio, http)")
