"""A fleet of long-lived TCP connections to one address, each asked on demand which
backend it reaches, each ending with an outcome: alive, reset, timeout or closed.

The fleet's event loop runs on a thread of its own, which enters a network namespace
first when asked (the lab's client namespace), so every socket it opens starts there.
Requests are HTTP/1.1 on the same connection (agnhost netexec keeps connections open
without an idle limit), so an answer names the backend that holds the connection.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lbconform.lab.nsexec import enter

T = TypeVar("T")

ALIVE, RESET, TIMEOUT, CLOSED, REFUSED = "alive", "reset", "timeout", "closed", "refused"


@dataclass(frozen=True)
class KeepAlive:
    """SO_KEEPALIVE with its timers, in seconds."""

    idle: int
    interval: int
    count: int = 3


@dataclass
class Connection:
    index: int
    keepalive: KeepAlive | None
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    backends: list[str] = field(default_factory=list)
    outcome: str = ALIVE
    ended_at: float | None = None
    error: str = ""

    @property
    def backend(self) -> str | None:
        return self.backends[0] if self.backends else None


def _set_keepalive(sock: socket.socket, ka: KeepAlive) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, ka.idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, ka.interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, ka.count)


class Fleet:
    """Open with ``open``, ask with ``request``, close with ``close`` (or use as a context)."""

    def __init__(self, host: str, port: int, netns: str | None = None, timeout: float = 3.0) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.connections: list[Connection] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(netns,), name="fleet", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error:
            raise self._error

    def _run(self, netns: str | None) -> None:
        try:
            if netns:
                enter(netns)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        asyncio.set_event_loop(self._loop)
        self._ready.set()
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- public ------------------------------------------------------------------------
    def open(self, count: int, keepalive: KeepAlive | None = None) -> list[Connection]:
        """Open ``count`` connections and ask each once which backend it reached."""
        new = [Connection(len(self.connections) + i, keepalive) for i in range(count)]
        self.connections += new
        self._call(self._gather(self._open(c) for c in new))
        return new

    def request(self, path: str = "/hostname") -> dict[str, int]:
        """Ask every live connection again; returns the count of each outcome."""
        live = [c for c in self.connections if c.outcome == ALIVE]
        self._call(self._gather(self._ask(c, path) for c in live))
        return self.outcomes()

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.connections:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
        return counts

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self.timeout)
        self._loop.close()

    # --- on the loop -------------------------------------------------------------------
    @staticmethod
    async def _gather(coros: Any) -> None:
        await asyncio.gather(*coros)

    async def _open(self, c: Connection) -> None:
        try:
            c.reader, c.writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.timeout)
        except ConnectionRefusedError as exc:
            self._end(c, REFUSED, exc)
            return
        except (TimeoutError, OSError) as exc:
            self._end(c, TIMEOUT if isinstance(exc, TimeoutError) else RESET, exc)
            return
        if c.keepalive is not None:
            _set_keepalive(c.writer.get_extra_info("socket"), c.keepalive)  # type: ignore[union-attr]
        await self._ask(c, "/hostname")

    async def _ask(self, c: Connection, path: str) -> None:
        assert c.reader is not None and c.writer is not None
        try:
            c.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
            await c.writer.drain()
            body = await asyncio.wait_for(self._response(c.reader), self.timeout)
        except ConnectionResetError as exc:
            self._end(c, RESET, exc)
            return
        except TimeoutError as exc:
            self._end(c, TIMEOUT, exc)
            return
        except (asyncio.IncompleteReadError, BrokenPipeError, OSError) as exc:
            self._end(c, CLOSED, exc)
            return
        c.backends.append(body.strip())

    @staticmethod
    async def _response(reader: asyncio.StreamReader) -> str:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode(errors="replace").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        return (await reader.readexactly(length)).decode(errors="replace")

    def _end(self, c: Connection, outcome: str, exc: BaseException) -> None:
        c.outcome = outcome
        c.ended_at = time.time()
        c.error = f"{type(exc).__name__}: {exc}"
        if c.writer is not None:
            c.writer.close()

    async def _close_all(self) -> None:
        for c in self.connections:
            if c.writer is not None and not c.writer.is_closing():
                c.writer.close()
