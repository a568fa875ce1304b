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
import concurrent.futures
import contextlib
import os
import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.core.io import DataError
from agentrl.core.manifest import public_url

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
    url_from: str | None = None

    def describe(self) -> str:
        """Return the server as a user wrote it (command and args, or the URL), without secrets: a URL read from
        the environment is named by its variable, a URL's password and query values are left out."""
        if self.command:
            return " ".join([self.command, *self.args])
        if self.url_from:
            return f"[url from ${self.url_from}]"
        return public_url(str(self.url))

    def secrets(self) -> dict[str, str]:
        """Return ``{variable: value}`` for every variable of this process the server reads (``env_from``,
        ``headers_from``, ``url_from``) that is set and not empty."""
        names = [*self.env_from.values(), *self.headers_from.values(), *([self.url_from] if self.url_from else [])]
        return {n: os.environ[n] for n in names if os.environ.get(n)}

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret value (:meth:`secrets`, longest first) replaced by
        ``[redacted:NAME]``."""
        for name, value in sorted(self.secrets().items(), key=lambda kv: -len(kv[1])):
            text = text.replace(value, f"[redacted:{name}]")
        return text

    def _from_environment(self, mapping: dict, what: str) -> dict:
        missing = [var for var in mapping.values() if var not in os.environ]
        if missing:
            raise DataError(f"MCP server {self.describe()}: {what} read from unset environment variable(s) "
                            f"{', '.join(missing)}")
        return {key: os.environ[var] for key, var in mapping.items()}

    def transport(self, errlog, http_errors: list | None = None):
        """Return the SDK's transport (an async context manager) for this server; an HTTP answer of status 400 or
        more is noted in ``http_errors`` (status, URL and the start of its body: the SDK keeps neither)."""
        if self.url or self.url_from:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = self._from_environment(self.headers_from, "headers")
            url = self._from_environment({"url": self.url_from}, "url")["url"] if self.url_from else self.url
            client = create_mcp_http_client(headers=headers or None)
            if http_errors is not None:
                async def note(response):
                    if response.status_code >= 400:
                        body = " ".join((await response.aread())[:300].decode("utf-8", "replace").split())
                        http_errors.append(f"HTTP {response.status_code} from {public_url(str(response.url))}"
                                           + (f": {body}" if body else ""))

                client.event_hooks["response"] = [*client.event_hooks.get("response", []), note]
            return streamable_http_client(url, http_client=client)
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
        self.protocol: str | None = None  # the revision negotiated: 2026-07-28 (server/discover) or a handshake one
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client = None
        self._stop: asyncio.Event | None = None
        self._held: asyncio.Future | None = None
        self._group: int | None = None  # a stdio server's process group (its pid: the SDK starts a new session)
        self._http_errors: list[str] = []
        self._pending: set = set()  # requests in flight (interrupt cancels them)
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
            if self._held is not None:  # stop the start itself: close() would wait for it to finish
                self._loop.call_soon_threadsafe(self._held.cancel)
            if self.server.command:  # a server that hangs at start: its group goes now, not after the SDK's grace
                self._group = self._group or server_pid(self._errlog)
                self._kill_group()
            self.close()
            why = f"no answer within {self.startup_timeout:g} s" if isinstance(exc, TimeoutError) else \
                failure(exc, self._http_errors)
            raise DataError(self.server.redact(f"MCP server {self.server.describe()} did not start: "
                                              f"{why}{self._stderr_tail()}")) from None
        self.instructions = getattr(self._client, "instructions", None)
        with contextlib.suppress(Exception):
            self.protocol = self._client.protocol_version
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
            async with Client(self.server.transport(self._errlog, self._http_errors)) as client:
                if self.server.command:
                    self._group = server_pid(self._errlog)
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
        # the SDK kills the group only when the server outlives its grace period: a server that exits on EOF leaves
        # its own children running, so the whole group goes, always
        self._kill_group()

    def _kill_group(self) -> None:
        if self._group is not None:
            with contextlib.suppress(OSError):
                os.killpg(self._group, signal.SIGKILL)
            self._group = None

    # ------------------------------------------------------------------ requests

    def _run(self, coro, what: str):
        if self._client is None or self.broken:
            coro.close()
            raise ConnectionError(f"the MCP server {self.server.describe()} is not connected")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._pending.add(future)
        try:
            return future.result(timeout=self.call_timeout)
        except concurrent.futures.CancelledError:
            self.broken = True  # interrupted mid-request: the server may still be working on it
            raise ConnectionError(f"{what}: interrupted (the item's time ran out)") from None
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
        finally:
            self._pending.discard(future)

    def interrupt(self) -> None:
        """Cancel the requests in flight (their callers get a ConnectionError at once); the connection is broken."""
        self.broken = True
        for future in list(self._pending):
            future.cancel()

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


def failure(exc: BaseException, http_errors: list[str] = ()) -> str:
    """Return what ended a start in words: the HTTP error answers noted, then each exception inside the SDK's
    exception groups as ``Type: message`` (a connection refused, an unknown host, ...)."""
    def leaves(e):
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                yield from leaves(inner)
        else:
            yield e

    said = list(dict.fromkeys([*http_errors, *(f"{type(e).__name__}: {e}" for e in leaves(exc))]))
    return "; ".join(said)


def server_pid(errlog) -> int | None:
    """Return the pid of this process's child whose stderr is the file ``errlog`` (the server the SDK started),
    read from /proc; None where there is no /proc or no such child."""
    try:
        own = os.fstat(errlog.fileno())
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != os.getpid():
                continue
            err = os.stat(f"/proc/{entry}/fd/2")
        except (OSError, ValueError, IndexError):
            continue
        if (err.st_dev, err.st_ino) == (own.st_dev, own.st_ino):
            return int(entry)
    return None


def resolve_cwd(cwd: str | None) -> str | None:
    """Return ``cwd`` as an absolute path (DataError when it is not a directory), or None."""
    if cwd is None:
        return None
    path = Path(cwd).expanduser().resolve()
    if not path.is_dir():
        raise DataError(f"MCP server cwd {cwd}: not a directory")
    return str(path)
