"""One live connection to an MCP server, usable from synchronous code: the agent loop's tool threads and TRL's
rollouts call :meth:`Connection.call` from any thread; the session lives on the connection's own event loop thread.

A server is a stdio command (launched as a child process; its stderr goes to a log file whose last lines a startup
failure quotes) or a streamable-HTTP URL (headers read from environment variables when the connection opens, never
stored with the settings). Every call is bounded: :meth:`Connection.call` waits ``call_timeout`` seconds, then the
connection counts as broken; a broken connection is closed (a stdio server's process tree is terminated, then
killed) and the next episode opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.io import DataError

CLOSE_TIMEOUT = 10.0  # seconds a close waits for the session and the server process to end


@dataclass(frozen=True)
class Server:
    """Where an MCP server is: ``command`` (+ ``args``, ``env``, ``env_from``, ``cwd``) for stdio, or ``url`` (+
    ``headers_from``) for streamable HTTP. ``env_from`` / ``headers_from`` map a server variable / an HTTP header to
    the name of an environment variable of this process, read when a connection opens (secrets stay out of
    settings, manifests and trajectories)."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    env_from: dict = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers_from: dict = field(default_factory=dict)

    def describe(self) -> str:
        """Return the server as a user wrote it (command and args, or the URL), without secrets."""
        return " ".join([self.command, *self.args]) if self.command else str(self.url)

    def _from_environment(self, mapping: dict, what: str) -> dict:
        missing = [var for var in mapping.values() if var not in os.environ]
        if missing:
            raise DataError(f"MCP server {self.describe()}: {what} read from unset environment variable(s) "
                            f"{', '.join(missing)}")
        return {key: os.environ[var] for key, var in mapping.items()}

    def transport(self, errlog):
        """Return the SDK's transport (an async context manager) for this server."""
        if self.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = self._from_environment(self.headers_from, "headers")
            return streamable_http_client(self.url, http_client=create_mcp_http_client(headers=headers or None))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = {**{k: str(v) for k, v in self.env.items()}, **self._from_environment(self.env_from, "env")}
        params = StdioServerParameters(command=self.command, args=list(self.args), env=env or None, cwd=self.cwd)
        return stdio_client(params, errlog=errlog)


class Connection:
    """A session with one server on a private event-loop thread. :meth:`open` connects (DataError naming the server
    and, for stdio, the end of its stderr when it fails within ``startup_timeout``); :meth:`call` and
    :meth:`list_tools` wait at most ``call_timeout``; :meth:`close` ends the session and the server process."""

    def __init__(self, server: Server, *, call_timeout: float = 30.0, startup_timeout: float = 60.0):
        self.server, self.call_timeout, self.startup_timeout = server, call_timeout, startup_timeout
        self.broken = False
        self.instructions: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client = None
        self._stop: asyncio.Event | None = None
        self._held: asyncio.Future | None = None
        # the server's stderr: quoted when it fails to start; closed (deleted) with the connection object
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> Connection:
        """Connect and initialise the session; return self."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-connection", daemon=True)
        self._thread.start()
        ready = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        try:
            self._client = ready.result(timeout=self.startup_timeout)
        except BaseException as exc:
            ready.cancel()
            self.close()
            why = f"no answer within {self.startup_timeout:g} s" if isinstance(exc, TimeoutError) else \
                f"{type(exc).__name__}: {exc}"
            raise DataError(f"MCP server {self.server.describe()} did not start: {why}{self._stderr_tail()}") from None
        self.instructions = getattr(self._client, "instructions", None)
        return self

    async def _start(self):
        ready = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._held = asyncio.ensure_future(self._hold(ready))
        return await ready

    async def _hold(self, ready: asyncio.Future) -> None:
        # the SDK's contexts are entered and left in this one task (anyio requires it); calls only use the client
        from mcp import Client

        try:
            async with Client(self.server.transport(self._errlog)) as client:
                ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            self.broken = True
            if not isinstance(exc, Exception):
                raise

    def close(self) -> None:
        """End the session (terminating a stdio server) and the loop thread; bounded by CLOSE_TIMEOUT."""
        loop, self._client = self._loop, None
        if loop is None:
            return
        if self._stop is not None and self._held is not None:
            async def finish():
                self._stop.set()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self._held, CLOSE_TIMEOUT)

            with contextlib.suppress(BaseException):
                asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout=CLOSE_TIMEOUT + 1)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_TIMEOUT)
        if not loop.is_running():
            loop.close()
        self._loop = self._thread = None

    # ------------------------------------------------------------------ requests

    def _run(self, coro, what: str):
        if self._client is None or self.broken:
            coro.close()
            raise ConnectionError(f"the MCP server {self.server.describe()} is not connected")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=self.call_timeout)
        except TimeoutError:
            future.cancel()
            self.broken = True  # a hung server: this connection is not used again
            raise TimeoutError(f"{what}: no answer from the MCP server within {self.call_timeout:g} s") from None
        except Exception as exc:
            ended = self._held is not None and self._held.done()
            if ended or not isinstance(exc, _tool_level_errors()) or "connection closed" in str(exc).lower():
                self.broken = True  # the session itself failed (the server crashed or closed the stream)
                raise ConnectionError(f"{what}: the MCP server closed the connection ({exc})") from None
            raise

    def list_tools(self) -> list:
        """Return the server's tools (every page of ``tools/list``)."""
        async def pages():
            tools, cursor = [], None
            while True:
                result = await self._client.list_tools(cursor=cursor) if cursor else await self._client.list_tools()
                tools += list(result.tools)
                cursor = getattr(result, "next_cursor", None) or getattr(result, "nextCursor", None)
                if not cursor:
                    return tools

        return self._run(pages(), "tools/list")

    def call(self, name: str, arguments: dict):
        """Return the CallToolResult of ``name(arguments)``."""
        return self._run(self._client.call_tool(name, arguments), f"tool {name}")

    def _stderr_tail(self, lines: int = 8) -> str:
        with contextlib.suppress(Exception):
            self._errlog.flush()
            self._errlog.seek(0)
            tail = [ln.rstrip() for ln in self._errlog.read().splitlines() if ln.strip()][-lines:]
            if tail:
                return "; its stderr ended with:\n  " + "\n  ".join(tail)
        return ""


def _tool_level_errors() -> tuple[type, ...]:
    # an MCP error answer to one request (bad arguments, unknown tool) leaves the session usable
    from mcp.shared.exceptions import MCPError

    return (MCPError,)


def resolve_cwd(cwd: str | None) -> str | None:
    """Return ``cwd`` as an absolute path (DataError when it is not a directory), or None."""
    if cwd is None:
        return None
    path = Path(cwd).expanduser().resolve()
    if not path.is_dir():
        raise DataError(f"MCP server cwd {cwd}: not a directory")
    return str(path)
