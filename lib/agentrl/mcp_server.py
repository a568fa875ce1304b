"""The retriever as an MCP tool server (mcp 2.x ``MCPServer``), over stdio or streamable HTTP on loopback.

Tool ``search(query, top_k=5)`` returns a list of ``{id, title, text, score}``. Concurrent calls are not
queued behind one another: requests that arrive while a search runs are collected and answered by one
batched search (one embedding forward pass for all their queries) in a worker thread, so the event loop
keeps accepting calls and throughput grows with concurrency.

    agentrl serve --index runs/corpus/hotpotqa/index --transport http --port 8765   # -> http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

from pydantic import BaseModel

from agentrl.io import DataError
from agentrl.retrieval.batcher import BatchSearcher


class Passage(BaseModel):
    """One search result as the tool returns it."""

    id: str
    title: str
    text: str
    score: float


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
            hits = await searcher.search(query, top_k)
        except DataError as exc:
            raise ToolError(str(exc)) from None
        return [Passage(id=h.id, title=h.title, text=h.text, score=h.score) for h in hits]

    return server


def serve(index_dir: str, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          method: str | None = None, max_top_k: int = 50, distinct: bool | None = None) -> None:
    """Load the index, warm the embedder up and serve until interrupted (blocks).

    ``distinct`` overrides the index's setting: distinct documents (default) or raw chunks (False)."""
    from agentrl.retrieval import Retriever

    retriever = Retriever.load(index_dir, overrides={"distinct": distinct})
    retriever.search("warm up", 1, method)  # load the embedder before the first client waits for it
    server = build_server(retriever, method=method, max_top_k=max_top_k)
    if transport == "stdio":
        server.run("stdio")
    elif transport in ("http", "streamable-http"):
        server.run("streamable-http", host=host, port=port, json_response=True)
    else:
        raise DataError(f"unknown transport '{transport}' (stdio, http)")
