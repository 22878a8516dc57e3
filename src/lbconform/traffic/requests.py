"""A request loop: HTTP requests to one address at a target rate, each failure kept with its kind.

Open loop, as load generators should be: request *n* is sent at ``start + n / rate`` whether
or not earlier ones have answered, so a stalled backend shows up as timeouts rather than as
a quietly lower rate. Two variants: a new connection per request (as upstream's rolling-update
disruption check does) and keep-alive over a pool of connections, where a connection that
fails is replaced by a new one. Every request ends as ``ok`` or as one failure kind: reset,
refused, timeout, closed (the server closed before answering) or wrong-answer (a status or
body the caller's check rejects); failures keep their time and detail, and every outcome
can feed a timeline.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lbconform.traffic.loopthread import LoopThread

OK, RESET, REFUSED, TIMEOUT, CLOSED, WRONG = "ok", "reset", "refused", "timeout", "closed", "wrong-answer"
NEW_CONNECTION, KEEP_ALIVE = "new-connection", "keep-alive"

#: How long a NAT box on the path (kube-proxy's nodes, a load balancer) keeps the conntrack entry
#: of an unanswered SYN, and so keeps sending that 4-tuple where it first sent it: the Linux
#: default of nf_conntrack_tcp_timeout_syn_sent. A source port whose attempt went unanswered
#: is not used again for this long plus the attempt's own timeout.
STALE_SYN_SECONDS = 120.0
#: Fresh source ports tried before a connection gives up on finding one.
PORT_TRIES = 16
#: Changes of the answering backend a result lists (behind a Cluster Service every request may
#: change it; the list is for addresses that move).
MAX_CHANGES = 1000

#: How a request ended, and how it is told apart.
Check = Callable[[int, str], bool]
OnOutcome = Callable[[str, float], None]


@dataclass(frozen=True)
class Failure:
    at: float
    kind: str
    detail: str


@dataclass
class LoopResult:
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    backends: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    #: When the answering backend changed: (start of the first request the new one answered, its
    #: name), the first MAX_CHANGES of them. Behind an address that one node holds (policy Local),
    #: each change is the address moving as the client saw it.
    changes: list[tuple[float, str]] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    @property
    def failed(self) -> int:
        return self.sent - self.outcomes[OK]

    def failure_kinds(self) -> dict[str, int]:
        return {k: v for k, v in self.outcomes.items() if k != OK}


def _kind_of(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return RESET
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    return CLOSED


class UnansweredPorts:
    """Source ports whose connection attempt went unanswered, kept until conntrack has forgotten them.

    A client that makes many connections from one address gets its source ports from the
    kernel, which may hand back, seconds later, the port of an attempt that timed out. The
    4-tuple then matches the unanswered SYN's conntrack entry on whatever box did the NAT, and
    goes where that SYN went: to a backend that has since gone (kubernetes/kubernetes#101607).
    That is the client's port choice, not the load balancer's behaviour, so the loop never
    reuses such a port while the entry can live: the implementation is measured with fresh
    flows, as a crowd of clients would send them.
    """

    def __init__(self, seconds: float = STALE_SYN_SECONDS) -> None:
        self.seconds = seconds
        self._until: dict[int, float] = {}

    def add(self, port: int, now: float) -> None:
        self._until[port] = now + self.seconds

    def holds(self, port: int, now: float) -> bool:
        """Whether ``port`` must not be used yet (entries past their time are dropped)."""
        for p in [p for p, until in self._until.items() if until <= now]:
            del self._until[p]
        return port in self._until

    def __bool__(self) -> bool:
        return bool(self._until)


def fresh_socket(family: socket.AddressFamily, unanswered: UnansweredPorts) -> socket.socket:
    """A non-blocking TCP socket; once some attempt went unanswered, bound to a source port that
    is not one of those (otherwise unbound: connect lets the kernel pick, as usual)."""
    for _ in range(PORT_TRIES):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        if not unanswered:
            return sock
        try:
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
            if not unanswered.holds(_local_port(sock), time.monotonic()):
                return sock
        except OSError:
            sock.close()
            raise
        sock.close()
    raise OSError(f"no fresh source port in {PORT_TRIES} tries")


def _local_port(sock: socket.socket | None) -> int:
    """The source port a socket was given (0 when it has none, or is closed)."""
    if sock is None:
        return 0
    try:
        return int(sock.getsockname()[1])
    except OSError:
        return 0


async def read_response(reader: asyncio.StreamReader) -> tuple[int, str]:
    """One HTTP/1.1 response with a Content-Length (what agnhost sends): (status, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    return status, (await reader.readexactly(length)).decode(errors="replace")


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer


class RequestLoop:
    """``run(rate, seconds)`` blocks and returns the result; ``start``/``stop`` run it alongside
    something else (a rollout), with ``stop`` returning the result."""

    def __init__(self, host: str, port: int, netns: str | None = None, *, path: str = "/hostname",
                 variant: str = NEW_CONNECTION, timeout: float = 3.0, check: Check | None = None,
                 on_outcome: OnOutcome | None = None) -> None:
        if variant not in (NEW_CONNECTION, KEEP_ALIVE):
            raise ValueError(f"variant {variant!r}: use {NEW_CONNECTION} or {KEEP_ALIVE}")
        self.host, self.port, self.path, self.variant = host, port, path, variant
        self.timeout = timeout
        self.check = check or (lambda status, _body: status == 200)
        self.on_outcome = on_outcome
        self.result = LoopResult()
        self._netns = netns
        self._resolved: tuple[socket.AddressFamily, tuple[Any, ...]] | None = None
        #: Source ports of attempts that went unanswered, not used again while held.
        self.unanswered = UnansweredPorts()
        self._idle: list[_Conn] = []
        #: The backend that answered the last request that succeeded ("" before any did).
        self._answered_by = ""
        self._stop: asyncio.Event | None = None
        self._thread: LoopThread | None = None
        self._done: Future[None] | None = None

    # --- public ------------------------------------------------------------------------
    def run(self, rate: float, seconds: float) -> LoopResult:
        self.start(rate, seconds)
        return self.wait()

    def run_closed(self, concurrency: int, seconds: float) -> LoopResult:
        """As fast as it goes: ``concurrency`` requests in flight at all times, for ``seconds``
        (what a benchmark measures; the suites use the open loop)."""
        self._thread = LoopThread(self._netns, name="request-loop")
        self._done = self._thread.submit(self._drive_closed(concurrency, seconds))
        return self.wait()

    def start(self, rate: float, seconds: float | None = None) -> None:
        """Send at ``rate`` per second until ``stop`` (or for ``seconds``)."""
        if rate <= 0:
            raise ValueError(f"rate {rate}: must be positive")
        self._thread = LoopThread(self._netns, name="request-loop")
        self._stop = asyncio.Event()
        self._done = self._thread.submit(self._drive(rate, seconds))

    def stop(self) -> LoopResult:
        assert self._thread is not None and self._stop is not None
        self._thread.loop.call_soon_threadsafe(self._stop.set)
        return self.wait()

    def wait(self) -> LoopResult:
        assert self._thread is not None and self._done is not None
        try:
            self._done.result()
        finally:
            self._thread.close()
        return self.result

    # --- on the loop -------------------------------------------------------------------
    async def _drive(self, rate: float, seconds: float | None) -> None:
        assert self._stop is not None
        loop = asyncio.get_running_loop()
        self.result.started = time.time()
        t0 = loop.time()
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        while not self._stop.is_set():
            due = t0 + n / rate
            if seconds is not None and due - t0 >= seconds:
                break
            delay = due - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            task = loop.create_task(self._one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        if tasks:
            await asyncio.wait(tasks)
        for conn in self._idle:
            conn.writer.close()
        self.result.ended = time.time()

    async def _drive_closed(self, concurrency: int, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self.result.started = time.time()
        end = loop.time() + seconds

        async def worker() -> None:
            while loop.time() < end:
                await self._one()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        for conn in self._idle:
            conn.writer.close()
        self.result.ended = time.time()

    async def _one(self) -> None:
        self.result.sent += 1
        started = time.monotonic()
        at = time.time()
        conn: _Conn | None = None
        opened: list[socket.socket] = []
        try:
            conn = await asyncio.wait_for(self._connection(opened), self.timeout)
            close = "close" if self.variant == NEW_CONNECTION else "keep-alive"
            conn.writer.write(f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nConnection: {close}\r\n\r\n"
                              .encode())
            await conn.writer.drain()
            status, body = await asyncio.wait_for(read_response(conn.reader), self.timeout)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            if conn is not None:
                port = _local_port(conn.writer.get_extra_info("socket"))
                conn.writer.close()
            else:  # the connection was never made: its port is held while conntrack may map it
                port = _local_port(opened[0]) if opened else 0
                if port:
                    self.unanswered.add(port, time.monotonic() + self.timeout)
                for sock in opened:
                    sock.close()
            self._record(_kind_of(exc), at, f"{type(exc).__name__}: {exc}" + (f" (from port {port})"
                                                                               if port else ""))
            return
        if self.variant == KEEP_ALIVE:
            self._idle.append(conn)
        else:
            conn.writer.close()
        if not self.check(status, body):
            self._record(WRONG, at, f"{status}: {body[:80]}")
            return
        self.result.latencies.append(time.monotonic() - started)
        backend = body.strip()
        if backend != self._answered_by and len(self.result.changes) < MAX_CHANGES:
            self.result.changes.append((at, backend))
        self._answered_by = backend
        self.result.backends[backend] += 1
        self._record(OK, at, "")

    async def _connection(self, opened: list[socket.socket]) -> _Conn:
        """A pooled connection, or a new one whose socket is put in ``opened`` before it
        connects, so a failed attempt can still name its source port."""
        if self.variant == KEEP_ALIVE and self._idle:
            return self._idle.pop()
        family, address = self._address()
        sock = fresh_socket(family, self.unanswered)
        opened.append(sock)
        await asyncio.get_running_loop().sock_connect(sock, address)
        reader, writer = await asyncio.open_connection(sock=sock)
        return _Conn(reader, writer)

    def _address(self) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
        if self._resolved is None:
            family, _, _, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
            self._resolved = (family, address)
        return self._resolved

    def _record(self, kind: str, at: float, detail: str) -> None:
        self.result.outcomes[kind] += 1
        if kind != OK:
            self.result.failures.append(Failure(at, kind, detail))
        if self.on_outcome is not None:
            self.on_outcome(kind, at)
