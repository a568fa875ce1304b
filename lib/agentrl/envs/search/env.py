"""Search environment: one tool, ``search(query)``, over the hybrid retriever (local) or an MCP server (remote).

Sample task (HotpotQA)::

    {"id": "dev_0", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "golden_answers": ["yes"], "metadata": {"type": "comparison", "supporting_facts": {...}}}

A call returns readable passages, not JSON::

    Doc 1 (Title: Ed Wood) Edward Davis Wood Jr. was an American filmmaker, actor, writer, ...
    Doc 2 (Title: Scott Derrickson) Scott Derrickson (born July 16, 1966) is an American director, ...

Metrics reported for the episode: em, f1, precision, recall, acc of the ``<answer>`` against
``golden_answers`` (agentrl.core.metrics), ``grounded`` (the answer appears in the passages the episode was shown, or
is yes/no), plus the number of searches.

The same class serves evaluation and TRL's ``GRPOTrainer(environment_factory=search_env_factory(backend))``:
heavy state (the loaded index) lives in the shared backend, episodes are cheap instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import weakref
from collections.abc import Callable
from pathlib import Path

from agentrl.core.chat import Turn
from agentrl.core.io import DataError
from agentrl.core.metrics import answer_metrics, gold_list, normalize_answer
from agentrl.data.corpus import gold_titles
from agentrl.data.pipeline import corpus_paths
from agentrl.envs import registry
from agentrl.envs.base import ToolError
from agentrl.envs.task import Task
from agentrl.retrieval import Retriever
from agentrl.retrieval.batcher import BatchSearcher
from agentrl.retrieval.index import Hit

MAX_QUERY_CHARS = 2000  # the same cap as the MCP server's (agentrl.retrieval.mcp_server.MAX_QUERY_CHARS)


class LocalSearch:
    """Search a loaded Retriever; concurrent calls on one event loop share batched retrievals."""

    def __init__(self, retriever, method: str | None = None):
        self.retriever, self.method = retriever, method
        self._batchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def search(self, query: str, top_k: int) -> list[Hit]:
        """Return the top_k hits for ``query``."""
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = BatchSearcher(self.retriever, self.method)
        return await batcher.search(query, top_k)


class MCPSearch:
    """Search through the ``search`` tool of an MCP retrieval server (``agentrl serve``) at ``url``.

    One MCP session per event loop, opened on the first search and shared by every episode on that loop:
    connecting and initialising per call would cost more than the search itself at high concurrency.
    """

    def __init__(self, url: str):
        self.url = url
        self._sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def _client(self):
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is None:
            ready, stop = loop.create_future(), asyncio.Event()
            entry = self._sessions[loop] = (ready, stop, loop.create_task(self._hold(ready, stop)))
        try:
            return await asyncio.shield(entry[0])
        except Exception:
            self._sessions.pop(loop, None)  # the next call connects again
            raise

    async def _hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        # the session's context is entered and left in this one task (anyio requires it); callers only use it
        from mcp import Client

        try:
            async with Client(self.url) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise

    async def search(self, query: str, top_k: int) -> list[Hit]:
        """Return the top_k hits for ``query`` from the server; a tool error raises RuntimeError."""
        client = await self._client()
        try:
            result = await client.call_tool("search", {"query": query, "top_k": top_k})
        except Exception:
            await self.aclose()  # a broken session is replaced on the next call
            raise
        if result.is_error:
            raise RuntimeError(result.content[0].text if result.content else "search failed")
        rows = (result.structured_content or {}).get("result", [])
        return [Hit(id=r["id"], title=r["title"], text=r["text"], score=r["score"], index=-1) for r in rows]

    async def aclose(self) -> None:
        """Close this event loop's session (a later search opens a new one)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            entry[1].set()
            with contextlib.suppress(Exception):  # a session that already failed has nothing left to report
                await entry[2]


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
                 passage_chars: int | None = None, max_query_chars: int = MAX_QUERY_CHARS):
        self._backend, self._top_k, self._max_query_chars = backend, top_k, max_query_chars
        self._max_searches, self._passage_chars = max_searches, passage_chars
        self.reset()

    def reset(self, **row) -> None:
        """Start an episode for a task row; keeps the question and gold answers, zeroes the call count."""
        self.row = row
        self.question = row.get("question", "")
        self.golden_answers = gold_list(row.get("golden_answers"))
        self.calls = 0
        self.queries: list[str] = []
        self.shown: list[str] = []  # the passages returned this episode, for the `grounded` metric

    async def search(self, query: str) -> str:
        """Search the knowledge base and return the most relevant passages with their titles.

        Args:
            query: What to look for: keywords, a name or a short question.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if len(query) > self._max_query_chars:
            raise ValueError(f"query too long: {len(query):,} characters (limit {self._max_query_chars:,}); "
                             "search with a few keywords or a short question")
        if self._max_searches is not None and self.calls >= self._max_searches:
            raise ToolError(f"Search limit reached ({self._max_searches} searches). Answer now with what you have.")
        if self._backend is None:
            raise RuntimeError("this SearchEnv has no search backend (build it with search_env_factory(backend))")
        self.calls += 1
        self.queries.append(query)
        hits = await self._backend.search(query.strip(), self._top_k)
        text = format_passages(hits, self._passage_chars)
        self.shown.append(text)
        return text


def grounded(prediction: str | None, shown: list[str]) -> float:
    """Return 1.0 when the answer can be read off the passages the episode was shown (its normalised form is in
    their normalised text) or is yes/no (a comparison's answer is never quoted), else 0.0.

    Curation keeps demonstrations whose answer the agent could see (``[data] min_grounded``): an oracle
    demonstration answering from gold it never retrieved teaches a student to guess."""
    answer = normalize_answer(prediction or "")
    if not answer:
        return 0.0
    return 1.0 if answer in ("yes", "no") or answer in normalize_answer(" ".join(shown)) else 0.0


def search_env_factory(backend, **kwargs) -> Callable[[], SearchEnv]:
    """Return a zero-argument SearchEnv constructor sharing ``backend``: TRL's ``environment_factory`` and the
    batch runner both call it once per episode slot. (Not a method: TRL exposes every public method as a tool.)"""
    return functools.partial(SearchEnv, backend, **kwargs)


def search_score(prediction: str | None, row: dict, env) -> dict:
    """Return the answer metrics (em, f1, precision, recall, acc against the row's golden answers) plus ``grounded``
    (1.0 when the answer is in the passages the episode saw)."""
    return {**answer_metrics(prediction, (row or {}).get("golden_answers") or []),
            "grounded": grounded(prediction, getattr(env, "shown", []))}


def search_plan(row: dict) -> list[Turn]:
    """Return the oracle's turns for a search task row: one search per gold title, then the answer."""
    titles = gold_titles(row) or [row["question"]]
    turns = [Turn(tool_calls=[{"id": f"call_{i}", "name": "search", "arguments": json.dumps({"query": t})}])
             for i, t in enumerate(titles)]
    answer = (gold_list(row.get("golden_answers")) or [""])[0]
    return turns + [Turn(content=f"<answer>{answer}</answer>", finish_reason="stop")]


def search_task(backend, *, top_k: int = 3, max_searches: int = 4, prompt: str | None = None,
                passage_chars: int | None = None, max_query_chars: int | None = None, max_turns: int = 6):
    """Return the search Task over a LocalSearch or MCPSearch backend. A query longer than ``max_query_chars``
    (default MAX_QUERY_CHARS, 2,000) is a tool error for the model."""
    limit = MAX_QUERY_CHARS if max_query_chars is None else max_query_chars
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DataError(f"max_query_chars must be a positive integer (got {max_query_chars!r})")
    spec = registry.get("search")
    prompt = prompt or next(iter(spec.prompts))
    env = search_env_factory(backend, top_k=top_k, max_searches=max_searches, passage_chars=passage_chars,
                             max_query_chars=limit)
    config = {"top_k": top_k, "max_searches": max_searches, "prompt": prompt, "passage_chars": passage_chars}
    if limit != MAX_QUERY_CHARS:  # only a changed limit enters the run fingerprint: older runs still resume
        config["max_query_chars"] = limit
    return Task(name=spec.name, make_env=env, system_prompt=registry.prompt(spec, prompt, max_searches=max_searches),
                oracle_plan=search_plan, score=search_score, config=config, max_turns=max_turns)


def backend_for(settings, preset: dict | None):
    """Return the search backend the settings name: the MCP server at ``mcp_url``, else the local index
    (``index``, default the preset's phase-00 index), loaded once. DataError naming the commands that build the
    index when it does not exist."""
    if settings.mcp_url:
        return MCPSearch(settings.mcp_url)

    index = Path(settings.index) if settings.index else corpus_paths(preset or {})[1]
    if not (index / "index.json").is_file():
        raise DataError(f"search index not found: {index} (build it first: `agentrl corpus --config NAME` then "
                        f"`agentrl index --corpus {index.parent} --config NAME`, or `agentrl demo`)")
    retriever = Retriever.load(str(index), dense=settings.search_method != "bm25",
                               overrides={"distinct": False} if settings.raw_chunks else None)
    return LocalSearch(retriever, settings.search_method)
