"""Batch concurrent searches: callers await one query each, the retriever sees one batch per round.

Requests that arrive while a batch is running are collected and answered by the next batch, run in a worker
thread; nothing waits on a timer, so a lone request is answered at once and a crowd shares one embedding
forward pass. One batcher serves one event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class BatchSearcher:
    """Answer concurrent ``search(query, top_k)`` calls with batched ``retriever.search_batch`` calls."""

    def __init__(self, retriever, method: str | None = None, max_batch: int = 64):
        self.retriever, self.method, self.max_batch = retriever, method, max_batch
        self._pending: deque[tuple[str, int, asyncio.Future]] = deque()
        self._worker: asyncio.Task | None = None

    async def search(self, query: str, top_k: int) -> list:
        """Return the retriever's top_k hits for ``query`` once the batch containing it has run."""
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
            except Exception:  # noqa: BLE001 - one bad query must not fail the others: answer each on its own
                await asyncio.to_thread(self._one_by_one, batch)
                continue
            for (_, top_k, fut), row in zip(batch, hits, strict=True):
                if not fut.done():
                    fut.set_result(row[:top_k])

    def _one_by_one(self, batch: list) -> None:
        loop = None
        for query, top_k, fut in batch:
            loop = loop or fut.get_loop()
            try:
                result, exc = self.retriever.search_batch([query], top_k, self.method)[0], None
            except Exception as err:  # noqa: BLE001 - handed to that caller only
                result, exc = None, err
            loop.call_soon_threadsafe(_settle, fut, result, exc)


def _settle(fut: asyncio.Future, result, exc) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
