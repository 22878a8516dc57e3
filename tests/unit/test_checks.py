"""``wait_for_backends``: which answers end the wait, on a client that answers from a script."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from lbconform.traffic import checks, probe_ports
from lbconform.traffic.client import Answer, Client
from lbconform.wait import LbWaitTimeout
from tests.unit.test_wait import FakeClock


class ScriptedClient:
    """Answers ``/hostname`` with the next name of a script."""

    def __init__(self, names: Iterator[str]) -> None:
        self.names = names
        self.asked = 0

    def backend(self, host: str, port: int, probe: bool = False) -> str:
        assert probe, "a wait's connections are probes"
        self.asked += 1
        return next(self.names)

    def get(self, host: str, port: int, path: str = "/hostname", timeout: float | None = None,
            probe: bool = False) -> Answer:
        """The next name as a 200 answer; the name "-" as a connection that fails."""
        name = self.backend(host, port, probe)
        if name == "-":
            raise ConnectionRefusedError(f"{host}:{port} refused")
        return Answer(200, name, "198.19.0.2")


def wait(names: Iterator[str], want: set[str], timeout: float = 3.0) -> ScriptedClient:
    client = ScriptedClient(names)
    checks.wait_for_backends(cast(Client, cast(Any, client)), "198.18.0.10", 80, want, timeout)
    return client


def test_ends_once_every_wanted_backend_answered() -> None:
    assert wait(itertools.cycle(["a", "b", "c"]), {"a", "b", "c"}).asked == 3


def test_a_change_still_propagating_settles_after_answers_in_a_row() -> None:
    """Three backends answer before a switch to Local takes effect, then only the local one."""
    client = wait(itertools.chain(["b", "c", "a", "b", "c"], itertools.repeat("a")), {"a"})
    assert client.asked == 5 + checks.SETTLED


def test_an_lb_that_keeps_sending_elsewhere_never_settles() -> None:
    """One connection in three to a backend outside the set: the wait fails and names it."""
    with pytest.raises(LbWaitTimeout, match=r"all 1 backends.*'a', 'b'"):
        wait(itertools.cycle(["b", "a", "a"]), {"a"}, timeout=1.5)


def test_an_announcer_that_moved_is_followed_where_the_implementation_names_it() -> None:
    """One announcing node: the set read before the speakers caught up names "a", the traffic goes
    to "b" and the implementation now names "b": the wait follows it, needing answers in a row."""
    client = ScriptedClient(itertools.repeat("b"))
    views = iter([{"b"}])
    checks.wait_for_backends(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a"}, 3.0,
                             reread=lambda: next(views))
    assert client.asked == checks.SETTLED


def test_traffic_elsewhere_than_the_implementation_names_is_not_followed() -> None:
    client = ScriptedClient(itertools.repeat("b"))
    with pytest.raises(LbWaitTimeout, match=r"all 1 backends.*'b'"):
        checks.wait_for_backends(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a"}, 0.5,
                                 reread=lambda: {"a"})


def test_reachable_by_named_backends_ignores_an_address_last_services_backends() -> None:
    """An address reused from a deleted Service answers from that Service's backend first: the
    wait for this Service's backends goes on until SUCCESSES answers in a row are its own."""
    client = ScriptedClient(itertools.chain(["old", "old", "a", "old"], itertools.repeat("a")))
    checks.wait_for_reachable(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a", "b"}, 3.0)
    assert client.asked == 4 + checks.SUCCESSES


def test_reachable_by_named_backends_fails_naming_the_last_answer() -> None:
    client = ScriptedClient(itertools.repeat("old"))
    with pytest.raises(LbWaitTimeout, match=r"from 2 backends.*'old'"):
        checks.wait_for_reachable(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a", "b"}, 0.5)


def test_unreachable_once_only_failures_or_other_services_backends_answer() -> None:
    """A deleted Service's address: its own backend answers, then nothing, then the next
    Service's backend (the implementation gave it the freed address): no longer reaching it."""
    client = ScriptedClient(iter(["a", "a", "-", "a", "-", "next", "-"]))
    checks.wait_for_unreachable(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a"}, 3.0)
    assert client.asked == 7


def test_an_address_that_keeps_reaching_its_backends_is_not_unreachable() -> None:
    client = ScriptedClient(itertools.cycle(["-", "a"]))
    with pytest.raises(LbWaitTimeout, match=r"other than these 1.*200 a"):
        checks.wait_for_unreachable(cast(Client, cast(Any, client)), "198.18.0.10", 80, {"a"}, 0.5)


def test_probe_ports_lie_outside_the_kernels_ephemeral_range() -> None:
    """Linux's default range leaves 61000-65535 to probes; a range that spans nearly every port
    leaves none (probes then take the kernel's ports)."""
    assert probe_ports.probe_range(probe_ports.parse_range("32768\t60999\n")) == range(61000, 65536)
    assert probe_ports.probe_range((40000, 65535)) == range(1024, 40000)
    assert probe_ports.probe_range((1024, 65000)) == range(65001, 65536)
    assert probe_ports.probe_range((1024, 65100)) is None


def test_probe_ports_are_shared_in_turn_by_every_process_toward_one_address(tmp_path: Path) -> None:
    """Two processes (two ProbePorts on one state directory) take the ports of one destination in
    turn; another destination has its own turn."""
    state = tmp_path / "not-yet"  # the first take makes it
    first, second = (probe_ports.ProbePorts(range(61000, 61004), "lbc-client", state) for _ in range(2))
    vip = "198.18.0.10"
    assert [first.take(vip, 80, 3), second.take(vip, 80, 3), first.take(vip, 80, 3)] == [61000, 61001, 61002]
    assert second.take("198.18.0.11", 80, 3) == 61000
    assert second.take(vip, 8080, 3) == 61000


def test_a_probe_port_rests_linger_after_its_probes_last_packet(tmp_path: Path) -> None:
    """More probes toward one address than there are ports: the walk laps, and the next take waits
    until LINGER has passed since the port's last probe could send (taken, plus its lifetime)."""
    clock = FakeClock()
    clock.now = 1000.0  # past a fresh file's stamps (zero) plus LINGER, as wall-clock time always is
    ports = probe_ports.ProbePorts(range(61000, 61003), "lbc-client", tmp_path, clock, clock.sleep)
    taken = [ports.take("198.18.0.10", 80, 9) for _ in range(3)]
    clock.now += 10
    assert ports.take("198.18.0.10", 80, 9) == taken[0] == 61000
    assert clock.sleeps == [9 + probe_ports.LINGER - 10]
    clock.now += probe_ports.LINGER + 9
    assert ports.take("198.18.0.10", 80, 9) == 61001
    assert len(clock.sleeps) == 1


def test_a_probe_leaves_from_a_probe_port_and_skips_a_busy_one(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """On loopback: a probe port held by another socket is skipped, the next one is used, and
    a measured connection (not a probe) still takes a kernel port."""
    with socket.socket() as server, socket.socket() as squatter:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        host, port = server.getsockname()
        ports = probe_ports.ProbePorts(range(62000, 62000 + probe_ports.MIN_PROBE_PORTS), "host", tmp_path)
        squatter.bind(("", 62000))
        squatter.listen(1)
        monkeypatch.setitem(probe_ports._by_netns, None, ports)
        seen: list[int] = []

        def answer() -> None:
            for _ in range(2):
                conn, peer = server.accept()
                with conn:
                    seen.append(peer[1])
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

        thread = threading.Thread(target=answer)
        thread.start()
        try:
            client = Client()
            assert client.get(host, port, probe=True).body == "ok"
            assert client.get(host, port).body == "ok"
        finally:
            thread.join(5)
        assert 62000 < seen[0] < 62000 + probe_ports.MIN_PROBE_PORTS
        assert not 62000 <= seen[1] < 62000 + probe_ports.MIN_PROBE_PORTS
