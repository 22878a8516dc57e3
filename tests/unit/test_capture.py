"""Resets on the wire: the BPF filter's verdicts, attribution and agreement (pure), and, as
root, real captures of RSTs on loopback, in bulk, and inside a network namespace of its own."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from lbconform.nsexec import run_in_netns
from lbconform.traffic import capture
from lbconform.traffic.capture import (
    UNKNOWN,
    CaptureError,
    Reset,
    ResetCapture,
    attribute,
    capture_available,
    compare,
    reset_times,
    resets_must_agree,
    rst_filter,
    sent_by_client,
)

CLIENT, LB = "203.0.113.10", "192.0.2.1"


def rst(src: str, sport: int, dst: str, dport: int, at: float = 0.0) -> Reset:
    return Reset(at, src, sport, dst, dport)


# --- the filter, run by libpcap's own interpreter (no root needed) -------------------------
def _tcp(sport: int, dport: int, flags: int) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 0, 0, 0)


def _ipv4(tcp: bytes) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 7, 0, 64, 6, 0,
                       socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")) + tcp


def _ipv6(tcp: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 6 << 28, len(tcp), 6, 64, socket.inet_pton(socket.AF_INET6, "fd00::1"),
                       socket.inet_pton(socket.AF_INET6, "fd00::2")) + tcp


def _passes(expr: str, packet: bytes) -> bool:
    try:
        from scapy.arch.common import free_filter
        from scapy.libs.structures import bpf_insn
        from scapy.libs.winpcapy import _lib
    except (ImportError, OSError):
        pytest.skip("libpcap is not installed")
    program = capture._compile(expr)
    try:
        run = _lib.bpf_filter
        run.argtypes = [ctypes.POINTER(bpf_insn), ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint]
        return bool(run(program.bf_insns, packet, len(packet), len(packet)))
    finally:
        free_filter(program)


RST, ACK, SYN, RST_ACK = 0x04, 0x10, 0x02, 0x14


@pytest.mark.parametrize(("packet", "expected"), [
    (_ipv4(_tcp(80, 40000, RST)), True),
    (_ipv4(_tcp(40000, 80, RST_ACK)), True),
    (_ipv4(_tcp(80, 40000, ACK)), False),
    (_ipv4(_tcp(80, 40000, SYN)), False),
    (_ipv6(_tcp(80, 40000, RST)), True),
    (_ipv6(_tcp(80, 40000, ACK)), False),
], ids=["v4-rst", "v4-rst-ack", "v4-ack", "v4-syn", "v6-rst", "v6-ack"])
def test_the_filter_takes_resets_only(packet: bytes, expected: bool) -> None:
    assert _passes(rst_filter(), packet) is expected


def test_ports_narrow_the_filter_to_either_end() -> None:
    expr = rst_filter((80, 8080))
    assert _passes(expr, _ipv4(_tcp(8080, 40000, RST)))
    assert _passes(expr, _ipv6(_tcp(40000, 80, RST)))
    assert not _passes(expr, _ipv4(_tcp(443, 40000, RST)))


# --- attribution and agreement -------------------------------------------------------------
def test_resets_to_the_client_count_once_per_connection_under_its_backend() -> None:
    vip = (LB, 80)
    connections = {((CLIENT, 40001), vip): "web-a", ((CLIENT, 40002), vip): "web-b",
                   ((CLIENT, 40003), vip): "web-a"}
    resets = [
        rst(LB, 80, CLIENT, 40001),
        rst(LB, 80, CLIENT, 40001),  # a second segment met the closed socket: same connection
        rst(LB, 80, CLIENT, 40002),
        rst(LB, 80, CLIENT, 40003),
        rst(CLIENT, 40002, LB, 80),  # the client reset one itself: kept apart
        rst(LB, 80, CLIENT, 49999),  # a connection nobody knows, seen both ways
        rst(CLIENT, 49999, LB, 80),
    ]
    assert attribute(resets, connections) == {"web-a": 2, "web-b": 1, UNKNOWN: 1}
    assert sent_by_client(resets, connections) == 1


def test_a_reset_from_another_server_to_a_shared_client_port_is_not_this_connections() -> None:
    """The kernel gives one ephemeral port to connections to different servers at once: another
    test's reset to that port, from its own VIP, must not count for ours (a flake in CI)."""
    connections = {((CLIENT, 40001), (LB, 80)): "web-a"}
    resets = [rst("198.18.0.9", 80, CLIENT, 40001), rst(CLIENT, 40001, "198.18.0.9", 80)]
    assert attribute(resets, connections) == {UNKNOWN: 1}
    assert sent_by_client(resets, connections) == 0
    assert reset_times(resets, connections) == {}
    assert reset_times([rst(LB, 80, CLIENT, 40001)], connections) == {((CLIENT, 40001), (LB, 80)): [0.0]}


def test_no_resets_attribute_to_nothing() -> None:
    assert attribute([], {((CLIENT, 40001), (LB, 80)): "web-a"}) == {}
    assert sent_by_client([], {}) == 0


def test_compare_says_which_side_saw_more() -> None:
    assert compare(3, 3) and "agree" in compare(3, 3).message
    more_on_socket = compare(5, 3)
    assert not more_on_socket
    assert "5 connection(s) reset on the socket but only 3 on the wire" in str(more_on_socket)
    assert "4 connection(s) reset on the wire but only 1 on the socket" in compare(1, 4).message


def test_resets_must_agree_fails_the_test_with_the_message() -> None:
    assert resets_must_agree(2, 2).agree
    with pytest.raises(AssertionError, match="on the socket but only 1 on the wire"):
        resets_must_agree(2, 1)


def test_a_forwarded_copy_is_dropped_a_repeat_on_one_interface_is_not() -> None:
    copies = capture._ForwardedCopies(window=0.005)
    assert not copies.is_copy(b"k", "eth0", 10.0)
    assert copies.is_copy(b"k", "eth1", 10.001)
    assert not copies.is_copy(b"k", "eth1", 10.002)   # same interface: a second reset
    assert not copies.is_copy(b"k", "eth0", 10.100)   # long after: a new packet


# --- real captures (root) ------------------------------------------------------------------
needs_capture = pytest.mark.skipif(capture_available() is not None,
                                   reason=capture_available() or "")


def _abort(sock: socket.socket) -> None:
    """Close with SO_LINGER (on, 0 s): the kernel sends RST instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    return server


def reset_connections(server: socket.socket, count: int) -> tuple[list[tuple[str, int]], int]:
    """Connect ``count`` clients, reset each from the server side, and wait until each client's
    socket reports it; returns the clients' ends and how many sockets saw a reset."""
    accepted: list[socket.socket] = []

    def accept() -> None:
        for _ in range(count):
            accepted.append(server.accept()[0])

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    clients = [socket.create_connection(server.getsockname(), timeout=5) for _ in range(count)]
    acceptor.join()
    for sock in accepted:
        _abort(sock)
    socket_resets = 0
    try:
        for sock in clients:
            try:
                sock.recv(1)
            except ConnectionResetError:
                socket_resets += 1
        return [sock.getsockname() for sock in clients], socket_resets
    finally:
        for sock in clients:
            sock.close()


def _sniffer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "AsyncSniffer"]


@needs_capture
def test_resets_on_loopback_are_counted_and_attributed_to_their_backends() -> None:
    server = _listener()
    port = server.getsockname()[1]
    began = time.time()
    with server, ResetCapture(None, "lo", (port,)) as cap:
        ends, socket_resets = reset_connections(server, 30)
    backends = {(end, ("127.0.0.1", port)): f"backend-{i % 3}" for i, end in enumerate(ends)}

    assert len(cap.events) == 30 and cap.dropped == 0
    assert {(r.dst, r.dport) for r in cap.events} == set(ends)
    ended = time.time()
    assert all(r.src == "127.0.0.1" and r.sport == port and began <= r.time <= ended for r in cap.events)
    assert attribute(cap.events, backends) == dict(Counter(backends.values()))
    assert sent_by_client(cap.events, backends) == 0
    assert resets_must_agree(socket_resets, sum(attribute(cap.events, backends).values()))
    assert not _sniffer_threads()


@needs_capture
def test_a_burst_of_two_thousand_resets_is_counted_in_full() -> None:
    server = _listener()
    with server, ResetCapture(None, "lo", (server.getsockname()[1],)) as cap:
        ends, _ = reset_connections(server, 2000)
    assert cap.dropped == 0
    assert len(cap.events) == 2000
    assert {(r.dst, r.dport) for r in cap.events} == set(ends)


@needs_capture
def test_the_filter_keeps_other_ports_out() -> None:
    server = _listener()
    with server, ResetCapture(None, "lo", (server.getsockname()[1] + 1,)) as cap:
        reset_connections(server, 5)
    assert cap.events == []


@needs_capture
def test_stop_is_prompt_idempotent_and_leaves_no_thread() -> None:
    cap = ResetCapture(None, "lo", (9,)).start()
    assert len(_sniffer_threads()) == 1
    began = time.monotonic()
    assert cap.stop() == []
    assert time.monotonic() - began < 1.0
    assert cap.stop() == []
    assert not _sniffer_threads()


@needs_capture
def test_an_interface_that_does_not_exist_is_an_error() -> None:
    with pytest.raises(CaptureError, match="no-such-if0"):
        ResetCapture(None, "no-such-if0").start()


@pytest.fixture
def private_netns() -> Iterator[str]:
    """A namespace of this test's own with only lo, up; removed afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    name = f"capture-test-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@needs_capture
def test_a_capture_in_a_namespace_sees_that_namespace_and_only_that(private_netns: str) -> None:
    server = run_in_netns(private_netns, _listener)  # a socket stays in the namespace it was made in
    port = server.getsockname()[1]
    with server, ResetCapture(private_netns, None, (port,)) as inside, \
            ResetCapture(None, "lo", (port,)) as outside:
        ends, socket_resets = run_in_netns(private_netns, lambda: reset_connections(server, 20))
    # every interface of the namespace, loopback's leaving copies dropped: each reset once
    assert sorted((r.dst, r.dport) for r in inside.events) == sorted(ends)
    assert resets_must_agree(socket_resets, len(inside.events))
    assert outside.events == []
