"""The reference LB's health probes: a target checked alike for several Services is probed once for
all of them, each Service judges the results by its own thresholds from the first result after it
subscribed, and the probe stops with its last checker."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from lbconform.wait import poll_until
from lbconform_lab.lb.health import Checker, Probes
from lbconform_lab.lb.model import HealthTarget
from lbconform_lab.lb.params import Params

#: Fast probes: the tests wait for a few dozen of them.
INTERVAL = 0.05


class Listener:
    """A loopback TCP port that counts the connections it accepts (each probe is one)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lis = Listener()
    yield lis
    lis.sock.close()


def checker(target: HealthTarget, healthy_threshold: int = 2) -> Checker:
    params = Params(hc_interval=INTERVAL, hc_timeout=1.0, hc_healthy=healthy_threshold)
    return Checker("svc/node", target, params, changed=lambda: None)


def test_services_checking_a_target_alike_share_one_probe(listener: Listener) -> None:
    probes = Probes()
    target = HealthTarget("tcp", "127.0.0.1", listener.port)
    a, b = checker(target), checker(target)
    probes.subscribe(a)
    probes.subscribe(b)
    assert probes.count() == 1
    poll_until(lambda: b.state.checks >= 10, timeout=10, description="ten results for the second checker")
    # One probe, one connection per result, whichever checker reads it.
    assert listener.accepted <= max(a.state.checks, b.state.checks) + 1
    assert a.state.healthy and b.state.healthy
    probes.unsubscribe(a)
    assert probes.count() == 1
    probes.unsubscribe(b)
    assert probes.count() == 0
    checks = b.state.checks
    poll_until(lambda: not probe_threads(listener.port), timeout=10, description="the probe's thread to end")
    assert b.state.checks == checks


def probe_threads(port: int) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"probe-tcp://127.0.0.1:{port}")]


def test_a_new_subscriber_needs_its_own_passes_whatever_others_found(listener: Listener) -> None:
    probes = Probes()
    target = HealthTarget("tcp", "127.0.0.1", listener.port)
    first = checker(target)
    probes.subscribe(first)
    poll_until(lambda: first.state.healthy, timeout=10, description="the first checker to find it healthy")
    late = checker(target, healthy_threshold=5)
    assert not late.state.healthy and late.state.checks == 0
    probes.subscribe(late)
    poll_until(lambda: late.state.checks >= 1, timeout=10, description="a result for the late checker")
    assert not late.state.healthy or late.state.checks >= 5
    poll_until(lambda: late.state.healthy, timeout=10, description="five passes for the late checker")
    assert late.state.checks >= 5
    probes.unsubscribe(first)
    probes.unsubscribe(late)


def test_different_timing_or_target_is_a_probe_of_its_own(listener: Listener) -> None:
    probes = Probes()
    target = HealthTarget("tcp", "127.0.0.1", listener.port)
    slow = Checker("svc/node", target, Params(hc_interval=1.0, hc_timeout=1.0), changed=lambda: None)
    checkers = [checker(target), slow, checker(HealthTarget("http", "127.0.0.1", listener.port, "/healthz"))]
    for c in checkers:
        probes.subscribe(c)
    assert probes.count() == 3
    for c in checkers:
        probes.unsubscribe(c)
    assert probes.count() == 0
