"""What every lbconform locustfile shares: failure kinds, the answer check, settings, totals by kind.

Not a locustfile (it defines no User): the locustfiles in this folder import it, and Locust
puts this folder on ``sys.path`` while it loads them. It must stay self-contained (Locust
and the standard library only), because a Locust worker pod runs it from a plain
``locustio/locust`` image where lbconform is not installed.

Kinds are the traffic engine's (``lbconform.traffic.requests``), so that a rollout measured
by a request loop and one measured by Locust read the same: ``reset``, ``refused``,
``timeout``, ``closed`` (the server closed before answering), ``wrong-answer`` (an HTTP
error status or an empty body), and ``other`` for what none of those explain. A failure is a
``LoadFailure`` whose text starts with its kind (``"reset: ConnectionResetError(104, ...)"``),
and Locust groups failures by that text, so totals by kind can be recovered from any of
Locust's failure listings: the failures CSV, the web UI, a worker's report.

Settings are environment variables, so that the same locustfile runs locally, under a
master, and in a worker pod whose spec sets them:

``LBCONFORM_PATH``
    the path to request (default ``/hostname``: agnhost netexec answers its pod name there)
``LBCONFORM_TIMEOUT``
    seconds to connect and, separately, to wait for an answer (default 3, the request loop's)
``LBCONFORM_USER_RATE``
    requests per second per user (default 10; Locust's ``constant_throughput``)
``LBCONFORM_FAILURES_FILE``
    where the master (or a standalone run) writes every failure and user exception it
    counted, as JSON, when it quits; unset, nothing is written. Locust's own failures CSV is
    rewritten once a second and can miss the last second; this file cannot.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from typing import Any

import gevent
from locust import events
from locust.runners import WorkerRunner

RESET, REFUSED, TIMEOUT, CLOSED = "reset", "refused", "timeout", "closed"
WRONG, OTHER = "wrong-answer", "other"
KINDS = (RESET, REFUSED, TIMEOUT, CLOSED, WRONG, OTHER)

PATH = os.environ.get("LBCONFORM_PATH", "/hostname")
TIMEOUT_SECONDS = float(os.environ.get("LBCONFORM_TIMEOUT", "3"))
USER_RATE = float(os.environ.get("LBCONFORM_USER_RATE", "10"))
FAILURES_FILE = os.environ.get("LBCONFORM_FAILURES_FILE", "")


class LoadFailure(Exception):
    """One failed request; its text (``str`` and ``repr``, which Locust uses) starts with its kind."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(kind, detail)
        self.kind, self.detail = kind, detail

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"

    __repr__ = __str__


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps: causes, contexts, urllib3's ``reason``,
    geventhttpclient's ``original`` (``RetriesExceeded``), exception args."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if any(e is s for s in seen) or len(seen) > 20:
            continue
        seen.append(e)
        nested = [e.__cause__, e.__context__, getattr(e, "reason", None), getattr(e, "original", None),
                  *e.args]
        todo.extend(n for n in nested if isinstance(n, BaseException))
    return seen


def _is_timeout(e: BaseException) -> bool:
    if isinstance(e, TimeoutError | gevent.Timeout):
        return True
    # requests' ReadTimeout and urllib3's timeouts are no TimeoutError but say so in their
    # names; urllib3's NewConnectionError descends from ConnectTimeoutError for old times'
    # sake and is no timeout.
    names = {c.__name__ for c in type(e).__mro__}
    return "NewConnectionError" not in names and any("Timeout" in n for n in names)


def classify(exc: BaseException) -> tuple[str, BaseException]:
    """The kind of a network failure, judged as the request loop judges it, and the error
    in the chain that decided it.

    Clients wrap the socket's error (``requests`` in ``ConnectionError(ProtocolError(...,
    ConnectionResetError))``, geventhttpclient in ``HTTPConnectionClosed`` with the reset as
    its ``__context__``), so the whole chain is searched, the most specific kind first.
    """
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, ConnectionRefusedError):
            return REFUSED, e
    for e in chain:
        # http.client's RemoteDisconnected is a ConnectionResetError only for compatibility:
        # it means the server closed (an empty read), which is ``closed``, not a reset.
        if type(e).__name__ == "RemoteDisconnected":
            continue
        if isinstance(e, ConnectionResetError | BrokenPipeError) or (
            isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE)
        ):
            return RESET, e
    for e in chain:
        if _is_timeout(e):
            return TIMEOUT, e
    for e in chain:
        if isinstance(e, OSError | EOFError) or type(e).__name__ in (
            "RemoteDisconnected", "HTTPConnectionClosed", "ProtocolError", "IncompleteRead",
            "HTTPParseError", "BadStatusLine", "ChunkedEncodingError", "EmptyResponse",
        ):
            return CLOSED, e
    return OTHER, exc


def kind_of(exc: BaseException) -> str:
    return classify(exc)[0]


def failure_of(exc: BaseException) -> LoadFailure:
    """The failure an error means; its text names the deciding error and, if other, the outer one."""
    kind, cause = classify(exc)
    detail = f"{type(cause).__name__}: {cause}"[:160]
    if cause is not exc:
        detail += f" (in {type(exc).__name__})"
    return LoadFailure(kind, detail)


def judge(status: int, body: str) -> LoadFailure | None:
    """None if the answer is what a backend gives (200 and a non-empty body), else the failure."""
    if status != 200:
        return LoadFailure(WRONG, f"HTTP {status}")
    if not body.strip():
        return LoadFailure(WRONG, "HTTP 200 with an empty body")
    return None


def read_response(sock: socket.socket, buffer: bytes = b"") -> tuple[int, str, bytes]:
    """One HTTP/1.1 response with a Content-Length off a raw socket: (status, body, leftover bytes).

    An orderly close before the whole answer raises EOFError (kind ``closed``); a malformed
    status line raises ValueError (``wrong-answer``, through the caller).
    """
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection before answering")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection in the middle of an answer")
        rest += chunk
    return status, rest[:length].decode(errors="replace"), rest[length:]


@events.init.add_listener
def _fresh_clock(**_kwargs: Any) -> None:
    # Locust sets its --run-time timer on gevent's loop clock, which has not moved since
    # gevent was imported: a Locust that took 3 s to start (a busy machine) would stop 3 s
    # early. Locust sets that timer right after this event.
    gevent.get_hub().loop.update_now()


@events.quitting.add_listener
def _write_failures(environment: Any, **_kwargs: Any) -> None:
    if not FAILURES_FILE or isinstance(environment.runner, WorkerRunner):
        return
    stats = environment.runner.stats if environment.runner is not None else environment.stats
    failures = [
        {"method": e.method, "name": e.name, "error": e.parse_error(e.error), "occurrences": e.occurrences}
        for e in stats.errors.values()
    ]
    exceptions = [
        {"count": e["count"], "msg": e["msg"]}
        for e in (environment.runner.exceptions.values() if environment.runner is not None else [])
    ]
    with open(FAILURES_FILE, "w") as out:
        json.dump({"failures": failures, "exceptions": exceptions}, out, indent=1)
