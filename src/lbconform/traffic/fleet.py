"""A fleet of long-lived TCP connections to one address, each asked on demand which
backend it reaches, each ending with an outcome (alive, reset, timeout, closed, refused)
and the time it ended.

The fleet's event loop runs on a thread of its own (``LoopThread``), inside a network
namespace when asked (the lab's client namespace), so every socket it opens starts there.
Requests are HTTP/1.1 on the same connection (agnhost netexec keeps connections open
without an idle limit), so an answer names the backend that holds the connection. Every
connection has a reader waiting on its socket all the time, so a reset or close that
arrives while the connection is idle is noticed (and timed) when it arrives, not at the
next request. Opens and requests run with bounded concurrency, so that ten thousand
connections do not arrive at once as a SYN flood the backends' accept queues would drop.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lbconform.traffic.loopthread import LoopThread
from lbconform.traffic.requests import read_response

T = TypeVar("T")

ALIVE, RESET, TIMEOUT, CLOSED, REFUSED = "alive", "reset", "timeout", "closed", "refused"
#: Connections opened (or asked) at the same time.
CONCURRENCY = 256


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
    local: tuple[str, int] = ("", 0)
    remote: tuple[str, int] = ("", 0)
    backends: list[str] = field(default_factory=list)
    outcome: str = ALIVE
    opened_at: float | None = None
    ended_at: float | None = None
    error: str = ""
    waiting: asyncio.Future[str] | None = None
    pump: asyncio.Task[None] | None = None

    @property
    def backend(self) -> str | None:
        return self.backends[0] if self.backends else None


def _set_keepalive(sock: socket.socket, ka: KeepAlive) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, ka.idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, ka.interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, ka.count)


def raise_open_files_limit(needed: int) -> None:
    """Lift this process's soft limit on open files toward the hard one: a fleet needs one
    descriptor per connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _outcome_of(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED
    if isinstance(exc, ConnectionResetError):
        return RESET
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    return CLOSED


class Fleet:
    """Open with ``open``, ask with ``request``, close with ``close`` (or use as a context)."""

    def __init__(self, host: str, port: int, netns: str | None = None, timeout: float = 3.0,
                 concurrency: int = CONCURRENCY) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.concurrency = concurrency
        self.connections: list[Connection] = []
        self._thread = LoopThread(netns, name="fleet")

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._thread.call(coro)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- public ------------------------------------------------------------------------
    def open(self, count: int, keepalive: KeepAlive | None = None) -> list[Connection]:
        """Open ``count`` connections and ask each once which backend it reached."""
        raise_open_files_limit(len(self.connections) + count)
        new = [Connection(len(self.connections) + i, keepalive) for i in range(count)]
        self.connections += new
        self._call(self._bounded(self._open(c) for c in new))
        return new

    def request(self, path: str = "/hostname") -> dict[str, int]:
        """Ask every live connection again; returns the count of each outcome."""
        live = [c for c in self.connections if c.outcome == ALIVE]
        self._call(self._bounded(self._ask(c, path) for c in live))
        return self.outcomes()

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.connections:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
        return counts

    def alive(self) -> list[Connection]:
        return [c for c in self.connections if c.outcome == ALIVE]

    def by_ends(self) -> dict[tuple[tuple[str, int], tuple[str, int]], str]:
        """(client end, server end) -> the backend the connection reached, for every connection
        that was made (see ``capture.attribute``)."""
        return {(c.local, c.remote): c.backend or "" for c in self.connections if c.local[1]}

    def close(self) -> None:
        if self._thread.closed:
            return
        self._call(self._close_all())
        self._thread.close()

    # --- on the loop -------------------------------------------------------------------
    async def _bounded(self, coros: Iterable[Coroutine[Any, Any, None]]) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(coro: Coroutine[Any, Any, None]) -> None:
            async with gate:
                await coro

        await asyncio.gather(*(one(c) for c in coros))

    async def _open(self, c: Connection) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                    self.timeout)
        except (TimeoutError, OSError) as exc:
            # A connect that fails otherwise than refused or reset (host unreachable after ARP
            # gave up, say) got no answer: a timeout, with the error kept in ``error``.
            outcome = _outcome_of(exc)
            self._end(c, TIMEOUT if outcome == CLOSED else outcome, exc)
            return
        c.reader, c.writer = reader, writer
        sock: socket.socket = writer.get_extra_info("socket")
        c.local, c.remote = sock.getsockname()[:2], sock.getpeername()[:2]
        c.opened_at = time.time()
        if c.keepalive is not None:
            _set_keepalive(sock, c.keepalive)
        c.pump = asyncio.get_running_loop().create_task(self._pump(c))
        await self._ask(c, "/hostname")

    async def _pump(self, c: Connection) -> None:
        """Read responses for as long as the connection lives; its end is the outcome."""
        assert c.reader is not None
        try:
            while True:
                _, body = await read_response(c.reader)
                if c.waiting is not None and not c.waiting.done():
                    c.waiting.set_result(body)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, OSError) as exc:
            outcome = RESET if isinstance(exc, ConnectionResetError) else CLOSED
            self._end(c, outcome, exc)

    async def _ask(self, c: Connection, path: str) -> None:
        if c.outcome != ALIVE or c.writer is None:
            return
        c.waiting = asyncio.get_running_loop().create_future()
        try:
            c.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
            await c.writer.drain()
            body = await asyncio.wait_for(asyncio.shield(c.waiting), self.timeout)
        except TimeoutError as exc:
            if c.outcome == ALIVE:
                self._end(c, TIMEOUT, exc)
            return
        except (OSError, asyncio.CancelledError) as exc:
            if c.outcome == ALIVE:
                self._end(c, _outcome_of(exc), exc)
            return
        c.backends.append(body.strip())

    def _end(self, c: Connection, outcome: str, exc: BaseException) -> None:
        if c.outcome != ALIVE:
            return
        c.outcome = outcome
        c.ended_at = time.time()
        c.error = f"{type(exc).__name__}: {exc}"
        if c.waiting is not None and not c.waiting.done():
            c.waiting.cancel()  # the request waiting on it ends; the outcome says how
        if c.writer is not None:
            c.writer.close()

    async def _close_all(self) -> None:
        for c in self.connections:
            if c.pump is not None:
                c.pump.cancel()
            if c.writer is not None and not c.writer.is_closing():
                c.writer.close()
        await asyncio.sleep(0)
