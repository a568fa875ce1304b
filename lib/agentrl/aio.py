"""Run a coroutine to completion from synchronous code, also where an event loop is already running.

Jupyter (and so every exported notebook) runs cells inside an event loop, where ``asyncio.run`` raises;
there the coroutine runs on a fresh loop in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Return the result of ``coro``, run on a new event loop (in a thread if one is already running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
