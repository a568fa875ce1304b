"""Run a coroutine to completion from synchronous code, also where an event loop is already running.

Jupyter (and so every exported notebook) runs cells inside an event loop, where ``asyncio.run`` raises;
there the coroutine runs on a fresh loop in a worker thread instead. The loop is uvloop's where it is installed
(a dependency; not on Windows): the runner's per-request cost is mostly event-loop and socket work, and uvloop
cut the harness's CPU per question by a quarter (benchmarks/agent_harness.py; docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory():
    """Return uvloop's event-loop constructor when uvloop is importable, else None (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Return the result of ``coro``, run on a new event loop (in a thread if one is already running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run, coro).result()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive at entry out of the cyclic collector's passes until the block exits; yields None.

    A long batch creates enough long-lived objects (trajectories in flight, records) to trigger full collections,
    and each full pass walks every object the process holds: ~340k after importing the libraries and loading an
    index, 0.16-0.24 s during which every in-flight episode stalls (the agent harness benchmark: one such pass
    per 2,000 questions, 7-10 % of the run; docs/decisions.md). ``gc.freeze()`` moves those objects to the
    permanent generation; they are still freed by reference counting, only cycles among them wait for the end
    of the block, when ``gc.unfreeze()`` hands them back. A block entered while anything is frozen (the caller's
    own ``gc.freeze()``, or another run in another thread) changes nothing, so it never unfreezes what it did not
    freeze.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
