"""The request loop on loopback: open-loop rate, and every failure kind told apart."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from lbconform.traffic.requests import (
    KEEP_ALIVE,
    NEW_CONNECTION,
    OK,
    PORT_TRIES,
    REFUSED,
    TIMEOUT,
    WRONG,
    RequestLoop,
    UnansweredPorts,
    fresh_socket,
)
from lbconform.wait import poll_until
from tests.unit.backend import NAME, serving


@pytest.fixture
def server() -> Iterator[int]:
    with serving() as port:
        yield port


@pytest.mark.parametrize("variant", [NEW_CONNECTION, KEEP_ALIVE])
def test_open_loop_rate_and_answers(server: int, variant: str) -> None:
    result = RequestLoop("127.0.0.1", server, variant=variant).run(rate=50, seconds=1.0)
    assert result.sent == 50 and result.outcomes == {OK: 50}
    assert result.backends == {NAME: 50}
    assert 0.9 <= result.ended - result.started <= 2.0


def test_wrong_answers_and_refusals_are_failures_with_their_kind(server: int) -> None:
    wrong = RequestLoop("127.0.0.1", server, path="/fail").run(rate=20, seconds=0.5)
    assert wrong.outcomes == {WRONG: 10} and wrong.failures[0].detail.startswith("500")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    refused = RequestLoop("127.0.0.1", closed_port).run(rate=20, seconds=0.5)
    assert refused.outcomes == {REFUSED: 10} and refused.failed == 10


def test_start_and_stop_around_something_else(server: int) -> None:
    """The loop sends until ``stop``, at no more than its rate, and nothing after: the figures
    are bounds of the rate, since a busy machine may send fewer than the rate asks."""
    loop = RequestLoop("127.0.0.1", server)
    started = time.monotonic()
    loop.start(rate=100)
    poll_until(lambda: loop.result.outcomes[OK] >= 5, timeout=60, description="five answers")
    result = loop.stop()
    elapsed = time.monotonic() - started
    sent = result.sent
    assert 5 <= sent <= 100 * elapsed + 1 and result.failed == 0
    threading.Event().wait(0.1)
    assert loop.result.sent == sent  # nothing after stop


def test_an_unanswered_attempt_names_its_source_port_and_is_held() -> None:
    """A listener whose accept queue is full drops SYNs: every attempt times out, and each
    failure names the source port the loop will not use again while conntrack may map it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            loop = RequestLoop("127.0.0.1", port, timeout=0.3)
            result = loop.run(rate=10, seconds=0.5)
    assert result.outcomes == {TIMEOUT: 5}
    ports = [int(f.detail.rsplit("from port ", 1)[1].rstrip(")")) for f in result.failures]
    assert len(set(ports)) == 5 and all(p > 0 for p in ports)
    assert all(loop.unanswered.holds(p, time.monotonic()) for p in ports)


def test_held_ports_expire_with_conntrack() -> None:
    held = UnansweredPorts(seconds=120.0)
    assert not held
    held.add(40000, now=10.0)
    assert held and held.holds(40000, now=129.9) and not held.holds(40001, now=11.0)
    assert not held.holds(40000, now=130.0) and not held


class _HoldsFirstOffers(UnansweredPorts):
    """Holds the first ``n`` ports it is asked about, whatever they are."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.add(0, now=0.0)  # non-empty, so the socket is bound and checked
        self.n = n
        self.refused: list[int] = []

    def holds(self, port: int, now: float) -> bool:
        if len(self.refused) < self.n:
            self.refused.append(port)
            return True
        return False


def test_a_fresh_socket_never_gets_a_held_port() -> None:
    held = _HoldsFirstOffers(3)
    with fresh_socket(socket.AF_INET, held) as sock:
        assert sock.getsockname()[1] not in held.refused and len(held.refused) == 3
    with fresh_socket(socket.AF_INET, UnansweredPorts()) as unbound:
        assert unbound.getsockname()[1] == 0
    with pytest.raises(OSError, match="no fresh source port"):
        fresh_socket(socket.AF_INET, _HoldsFirstOffers(PORT_TRIES))


def test_changes_of_the_answering_backend_are_listed_when_first_seen() -> None:
    """An address that moves shows as a change of the backend that answers: each change is listed
    with the start of the first request the new backend answered."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    names = iter(["a"] * 5 + ["b"] * 5 + ["a"] * 5)

    class Moving(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = next(names, "a").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Moving)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        result = RequestLoop("127.0.0.1", httpd.server_address[1]).run(rate=20, seconds=0.75)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.outcomes == {OK: 15}
    assert [b for _, b in result.changes] == ["a", "b", "a"]
    starts = [at for at, _ in result.changes]
    assert starts == sorted(starts) and 0.2 <= starts[1] - starts[0] <= 0.35
