"""Search environment: one tool, ``search(query)``, over the hybrid retriever (local) or an MCP server (remote).

Sample task (HotpotQA)::

    {"id": "dev_0", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "golden_answers": ["yes"], "metadata": {"type": "comparison", "supporting_facts": {...}}}

A call returns readable passages, not JSON::

    Doc 1 (Title: Ed Wood) Edward Davis Wood Jr. was an American filmmaker, actor, writer, ...
    Doc 2 (Title: Scott Derrickson) Scott Derrickson (born July 16, 1966) is an American director, ...

Metrics reported for the episode: em, f1, precision, recall, acc of the ``<answer>`` against
``golden_answers`` (agentrl.metrics), plus the number of searches.

The same class serves evaluation and TRL's ``GRPOTrainer(environment_factory=search_env_factory(backend))``:
heavy state (the loaded index) lives in the shared backend, episodes are cheap instances.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable

from agentrl.retrieval.index import Hit


class LocalSearch:
    """Search a loaded Retriever; concurrent calls on one event loop share batched retrievals."""

    def __init__(self, retriever, method: str | None = None):
        self.retriever, self.method = retriever, method
        self._batchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def search(self, query: str, top_k: int) -> list[Hit]:
        """Return the top_k hits for ``query``."""
        from agentrl.retrieval.batcher import BatchSearcher

        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = BatchSearcher(self.retriever, self.method)
        return await batcher.search(query, top_k)


class MCPSearch:
    """Search through the ``search`` tool of an MCP retrieval server (``agentrl serve``) at ``url``."""

    def __init__(self, url: str):
        self.url = url

    async def search(self, query: str, top_k: int) -> list[Hit]:
        """Return the top_k hits for ``query`` from the server; a tool error raises RuntimeError."""
        from mcp import Client

        async with Client(self.url) as client:
            result = await client.call_tool("search", {"query": query, "top_k": top_k})
        if result.is_error:
            raise RuntimeError(result.content[0].text if result.content else "search failed")
        rows = (result.structured_content or {}).get("result", [])
        return [Hit(id=r["id"], title=r["title"], text=r["text"], score=r["score"], index=-1) for r in rows]


def format_passages(hits: list[Hit], max_chars: int | None = None) -> str:
    """Return hits as numbered ``Doc i (Title: ...) text`` lines (text cut to ``max_chars`` when set)."""
    if not hits:
        return "No results found. Try a different query."
    lines = []
    for i, h in enumerate(hits, start=1):
        text = h.text if not max_chars or len(h.text) <= max_chars else h.text[:max_chars].rstrip() + " ..."
        lines.append(f"Doc {i} (Title: {h.title}) {text}")
    return "\n".join(lines)


class SearchEnv:
    """Multi-hop QA over a passage corpus with a single search tool."""

    def __init__(self, backend=None, top_k: int = 5, max_searches: int | None = None,
                 passage_chars: int | None = None):
        self._backend, self._top_k = backend, top_k
        self._max_searches, self._passage_chars = max_searches, passage_chars
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode for a task row; keeps the question and gold answers, zeroes the call count."""
        self.row = row
        self.question = row.get("question", "")
        self.golden_answers = list(row.get("golden_answers") or [])
        self.calls = 0
        self.queries: list[str] = []

    async def search(self, query: str) -> str:
        """Search the knowledge base and return the most relevant passages with their titles.

        Args:
            query: What to look for: keywords, a name or a short question.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if self._max_searches is not None and self.calls >= self._max_searches:
            return f"Search limit reached ({self._max_searches} searches). Answer now with what you have."
        if self._backend is None:
            raise RuntimeError("this SearchEnv has no search backend (build it with search_env_factory(backend))")
        self.calls += 1
        self.queries.append(query)
        hits = await self._backend.search(query.strip(), self._top_k)
        return format_passages(hits, self._passage_chars)


def search_env_factory(backend, **kwargs) -> Callable[[], SearchEnv]:
    """Return a zero-argument SearchEnv constructor sharing ``backend``: TRL's ``environment_factory`` and the
    batch runner both call it once per episode slot. (Not a method: TRL exposes every public method as a tool.)"""
    return functools.partial(SearchEnv, backend, **kwargs)
