"""The request loop on loopback: open-loop rate, and every failure kind told apart."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from lbconform.traffic.requests import KEEP_ALIVE, NEW_CONNECTION, OK, REFUSED, WRONG, RequestLoop
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
    loop = RequestLoop("127.0.0.1", server)
    loop.start(rate=100)
    threading.Event().wait(0.3)
    result = loop.stop()
    assert 20 <= result.sent <= 45 and result.failed == 0
