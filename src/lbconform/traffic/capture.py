"""TCP resets counted on the wire: every segment with RST set that crosses a network namespace's
interfaces between ``start`` and ``stop``, with its time and both ends.

The fleet counts resets where the client feels them (``ConnectionResetError``); this module
counts them where they travel, so a suite can tell "the LB reset the connection" from "the
client gave up" and name the backend each reset came through. The two counts must agree.

How it stays exact:

* The filter runs in the kernel (classic BPF compiled by libpcap through scapy): only RST
  segments reach Python, which parses about 10 000 a second on a 2-core machine, and a
  32 MiB receive buffer holds the rest of a burst while the reader catches up (20 000 resets
  sent on loopback at 175 000 a second were all counted). What the kernel still had to drop
  it counts; ``dropped`` says so, and a capture that dropped anything is incomplete.
* The packet socket is opened on a thread that entered the namespace first: a socket belongs
  for life to the namespace it was created in, so scapy's ``AsyncSniffer`` can read it from
  a thread of its own wherever that thread is. Anything queued when ``stop`` is called is
  read before the socket closes, so a reset that reached the client before ``stop`` is in
  ``events``.
* The socket is a cooked one (``SOCK_DGRAM``): every interface hands it packets starting at
  the IP header, so one filter fits ethernet, loopback and tunnels alike. By default it
  listens on every interface of the namespace (``iface`` None or ``"any"``). Loopback shows
  the kernel each packet twice (leaving and arriving); the leaving copy is dropped, as
  libpcap does. A namespace that forwards sees a forwarded packet on two interfaces: the
  second copy, identical in addresses, IP id and TCP header within a few milliseconds, is
  dropped too. The lab's client namespace (lo and eth0, no forwarding) and a client machine
  see each reset exactly once; name an interface to see only that one.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from scapy.arch.common import compile_filter, free_filter
from scapy.data import DLT_RAW, MTU
from scapy.error import Scapy_Exception
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.libs.structures import bpf_program, sock_fprog
from scapy.packet import Packet
from scapy.sendrecv import AsyncSniffer
from scapy.supersocket import SuperSocket

from lbconform.errors import LbconformError
from lbconform.nsexec import run_in_netns

log = logging.getLogger(__name__)

__all__ = [
    "UNKNOWN",
    "Agreement",
    "CaptureError",
    "Reset",
    "ResetCapture",
    "attribute",
    "capture_available",
    "compare",
    "resets_must_agree",
    "rst_filter",
    "sent_by_client",
]

#: The key ``attribute`` counts resets under when they belong to no known connection.
UNKNOWN = "unknown"

#: Receive buffer for the packet socket. The kernel charges each queued packet its full
#: buffer size (about 1 KiB for a bare RST on loopback, where both copies queue), so this
#: holds some 30 000 resets: a burst of thousands waits here while the reader parses.
BUFFER_BYTES = 32 << 20
#: How far apart the two copies of a forwarded packet can be (they are microseconds apart).
FORWARDED_COPY_WINDOW = 0.005
#: How long ``start`` waits for scapy's thread to run, and ``stop`` for it to end: both take
#: milliseconds, so reaching this means the thread is stuck.
THREAD_TIMEOUT = 5.0

CAP_NET_RAW = 13
ETH_P_ALL, ETH_P_IP, ETH_P_IPV6 = 0x0003, 0x0800, 0x86DD
SOL_PACKET, PACKET_STATISTICS, PACKET_OUTGOING = 263, 6, 4
ARPHRD_LOOPBACK = 772
SO_ATTACH_FILTER, SO_RCVBUFFORCE, SO_TIMESTAMPNS = 26, 33, 35
_TIMESPEC = struct.Struct("qq")
_TPACKET_STATS = struct.Struct("II")

#: libpcap's ``tcp[...]`` reaches TCP over IPv4 only; over IPv6 the flags byte is read at its
#: fixed offset (40-byte header, TCP next), so a reset behind IPv6 extension headers is missed.
_RST_V4 = "(tcp[tcpflags] & tcp-rst != 0)"
_RST_V6 = "(ip6[6] == 6 and ip6[53] & tcp-rst != 0)"


class CaptureError(LbconformError):
    """The capture could not start, or ended before it was stopped: its counts mean nothing."""


@dataclass(frozen=True)
class Reset:
    """One RST segment: when it was seen (epoch seconds, kernel timestamp) and its two ends."""

    time: float
    src: str
    sport: int
    dst: str
    dport: int


# --- can this process capture --------------------------------------------------------------
def _has_net_raw() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_RAW & 1)
    except OSError:
        pass
    return False


def rst_filter(ports: tuple[int, ...] = ()) -> str:
    """The BPF expression: TCP with RST set, to or from one of ``ports`` when any are given."""
    expr = f"({_RST_V4} or {_RST_V6})"
    if ports:
        expr += " and (" + " or ".join(f"port {p}" for p in ports) + ")"
    return expr


def _compile(expr: str) -> bpf_program:
    """Compile for raw IP, which is what a cooked packet socket's filter sees."""
    try:
        return compile_filter(expr, linktype=DLT_RAW)
    except (ImportError, OSError, Scapy_Exception) as exc:
        raise CaptureError(f"BPF filter {expr!r} does not compile ({exc}): "
                           "install libpcap (the tcpdump package brings it)") from None


def _attach(sock: socket.socket, expr: str) -> None:
    program = _compile(expr)
    try:  # the kernel copies the instructions, so libpcap's can go right after
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                        bytes(sock_fprog(program.bf_len, program.bf_insns)))
    finally:
        free_filter(program)


def capture_available() -> str | None:
    """None when this process can capture resets, else why not in one line."""
    if not _has_net_raw():
        return "not measured: capturing needs root or CAP_NET_RAW"
    try:
        free_filter(_compile(rst_filter((80,))))
    except CaptureError as exc:
        return f"not measured: {exc}"
    return None


# --- the socket ----------------------------------------------------------------------------
class _ForwardedCopies:
    """Remembers recent packets to drop the second copy of one that crossed two interfaces."""

    def __init__(self, window: float = FORWARDED_COPY_WINDOW) -> None:
        self.window = window
        self._seen: dict[bytes, tuple[str, float]] = {}

    def is_copy(self, key: bytes, iface: str, at: float) -> bool:
        last = self._seen.get(key)
        self._seen[key] = (iface, at)
        if len(self._seen) > 4096:
            self._seen = {k: v for k, v in self._seen.items() if at - v[1] <= self.window}
        # The same reset twice on one interface is two resets (a peer answering two segments).
        return last is not None and last[0] != iface and at - last[1] <= self.window


def _packet_key(proto: int, data: bytes) -> bytes | None:
    """Addresses, IP id (v4) or flow label (v6) and the TCP header: what forwarding keeps."""
    if proto == ETH_P_IP and len(data) >= 20:
        ihl = (data[0] & 0x0F) * 4
        return data[4:6] + data[12:20] + data[ihl:ihl + 20]
    if proto == ETH_P_IPV6 and len(data) >= 60:
        return data[1:4] + data[8:60]
    return None


class _RstSocket(SuperSocket):
    """A cooked packet socket with the RST filter attached, handing scapy each reset once."""

    desc = "TCP resets from a cooked packet socket, loopback and forwarded copies dropped"

    def __init__(self, iface: str | None, expr: str, buffer_bytes: int) -> None:
        # Bound to an interface, the socket is made with protocol 0 so it takes no packet
        # before the filter is attached; unbound it takes every packet at once, and what
        # arrived before the filter is read away below.
        self.ins = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM,
                                 0 if iface else socket.htons(ETH_P_ALL))
        self.outs = None
        self.iface = iface or "any"
        self.promisc = False
        self._copies = _ForwardedCopies()
        try:
            self.ins.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            try:
                self.ins.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer_bytes)
            except PermissionError:  # CAP_NET_RAW without CAP_NET_ADMIN: capped at rmem_max
                self.ins.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
            _attach(self.ins, expr)
            if iface:
                try:
                    self.ins.bind((iface, ETH_P_ALL))
                except OSError as exc:
                    raise CaptureError(f"cannot capture on {iface}: {exc.strerror}") from None
            else:
                while select.select([self.ins], [], [], 0)[0]:
                    self.ins.recv(MTU)
                self.statistics()  # forget what the kernel counted before the filter
        except BaseException:
            self.ins.close()
            raise

    def recv(self, x: int = MTU, **kwargs: Any) -> Packet | None:
        data, ancdata, _flags, address = self.ins.recvmsg(x, socket.CMSG_SPACE(_TIMESPEC.size))
        iface, proto, pkttype, hatype = address[:4]
        if pkttype == PACKET_OUTGOING and hatype == ARPHRD_LOOPBACK:
            return None  # loopback's arriving copy follows; count that one
        at = next((_TIMESPEC.unpack(d[:_TIMESPEC.size]) for level, kind, d in ancdata
                   if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS), None)
        stamp = at[0] + at[1] / 1e9 if at else time.time()
        key = _packet_key(proto, data)
        if key is None or self._copies.is_copy(key, iface, stamp):
            return None
        packet: Packet = IP(data) if proto == ETH_P_IP else IPv6(data)
        packet.time = stamp
        return packet

    def pending(self) -> Iterator[Packet]:
        """What is still queued, without waiting for more."""
        while select.select([self.ins], [], [], 0)[0]:
            packet = self.recv()
            if packet is not None:
                yield packet

    def statistics(self) -> int:
        """Packets the kernel dropped for want of buffer since the last call."""
        raw = self.ins.getsockopt(SOL_PACKET, PACKET_STATISTICS, _TPACKET_STATS.size)
        return int(_TPACKET_STATS.unpack(raw)[1])


def _reset_of(packet: Packet) -> Reset | None:
    if TCP not in packet:
        return None
    tcp = packet[TCP]
    return Reset(float(packet.time), str(packet.src), int(tcp.sport), str(packet.dst), int(tcp.dport))


# --- the capture ---------------------------------------------------------------------------
class ResetCapture:
    """Collects every RST seen in ``netns`` (None: this process's own) from start until stop.

    ``iface`` None or ``"any"`` listens on every interface of the namespace; ``ports``
    narrows to resets to or from those ports. Use as a context manager, or call ``start``
    and ``stop``; after stop, ``events`` holds the resets in the order they were read and
    ``dropped`` the packets the kernel could not queue (0 for a complete capture; on
    loopback a reset is two packets, both queued).
    """

    def __init__(self, netns: str | None = None, iface: str | None = None, ports: tuple[int, ...] = (),
                 *, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.netns = netns
        self.iface = None if iface in (None, "any") else iface
        self.ports = ports
        self.buffer_bytes = buffer_bytes
        self.filter = rst_filter(ports)
        self.events: list[Reset] = []
        self.dropped = 0
        self._socket: _RstSocket | None = None
        self._sniffer: AsyncSniffer | None = None

    @property
    def where(self) -> str:
        return f"{self.iface or 'any interface'} in {self.netns or 'this namespace'}"

    def __enter__(self) -> ResetCapture:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.stop()
            return
        try:  # the error in flight says more than one from the capture it interrupted
            self.stop()
        except CaptureError as error:
            log.warning("%s", error)

    def _keep(self, packet: Packet) -> None:
        reset = _reset_of(packet)
        if reset is not None:
            self.events.append(reset)

    def start(self) -> ResetCapture:
        if self._sniffer is not None:
            raise CaptureError(f"the capture on {self.where} is already running")

        def open_socket() -> _RstSocket:
            return _RstSocket(self.iface, self.filter, self.buffer_bytes)

        sock = run_in_netns(self.netns, open_socket) if self.netns else open_socket()
        self.events, self.dropped = [], 0
        started = threading.Event()
        sniffer = AsyncSniffer(opened_socket=sock, store=False, prn=self._keep,
                               started_callback=started.set)
        sniffer.start()
        # AsyncSniffer refuses to stop before its thread runs, so start waits for it.
        if not started.wait(THREAD_TIMEOUT):
            sock.close()  # its select then fails and the thread ends
            raise CaptureError(f"the capture thread on {self.where} did not start "
                               f"within {THREAD_TIMEOUT:g}s: {sniffer.exception}")
        self._socket, self._sniffer = sock, sniffer
        log.info("capturing TCP resets on %s (filter %s)", self.where, self.filter)
        return self

    def stop(self) -> list[Reset]:
        """Stop, read what is still queued, close; returns ``events``. Safe to call twice."""
        sock, sniffer = self._socket, self._sniffer
        if sock is None or sniffer is None:
            return self.events
        self._socket = self._sniffer = None
        try:
            died = not sniffer.running
            if not died:
                try:
                    sniffer.stop(join=False)
                except Scapy_Exception:  # it ended between the check and the call
                    died = True
            try:
                sniffer.join(THREAD_TIMEOUT)
            except Exception as exc:
                raise CaptureError(f"the capture on {self.where} failed: {exc}") from exc
            if sniffer.thread is not None and sniffer.thread.is_alive():
                raise CaptureError(f"the capture thread on {self.where} did not stop "
                                   f"within {THREAD_TIMEOUT:g}s")
            # scapy closes a socket it could not read; then the capture ended early.
            if died or sock.closed:
                raise CaptureError(f"the capture on {self.where} ended before it was stopped "
                                   "(scapy logged why): its counts are incomplete")
            for packet in sock.pending():
                self._keep(packet)
            self.dropped = sock.statistics()
        finally:
            sock.close()
        if self.dropped:
            log.warning("capture on %s dropped %d packets for want of buffer: the count is short",
                        self.where, self.dropped)
        log.info("captured %d TCP resets on %s", len(self.events), self.where)
        return self.events


# --- what the resets mean ------------------------------------------------------------------
#: A connection by its two ends as the client sees them: (client address, port), (server address, port).
Ends = tuple[tuple[str, int], tuple[str, int]]


def _ends(reset: Reset) -> Ends:
    return (reset.src, reset.sport), (reset.dst, reset.dport)


def attribute(resets: Iterable[Reset], connections: Mapping[Ends, str]) -> dict[str, int]:
    """Connections reset toward the client, per backend.

    ``connections`` maps each connection's two ends (client end, server end) to the backend it
    reached. A reset counts when it comes from a connection's server end to its client end: one
    client port may carry connections to several servers at once (the kernel shares an
    ephemeral port between destinations), so the port alone does not say whose a reset is. Each
    connection counts once, however many RSTs it got (a peer answers every segment that reaches
    a closed socket with one), because the client's socket fails once. Resets on no known
    connection count, once per connection (address pair), under ``UNKNOWN``; resets the client
    sent count in ``sent_by_client``, never here.
    """
    resets = list(resets)
    counts: dict[str, int] = {}
    for ends in reset_times(resets, connections):
        counts[connections[ends]] = counts.get(connections[ends], 0) + 1
    unknown = {(min(src, dst), max(src, dst)) for src, dst in map(_ends, resets)
               if (dst, src) not in connections and (src, dst) not in connections}
    if unknown:
        counts[UNKNOWN] = len(unknown)
    return counts


def from_server(resets: Iterable[Reset], host: str, port: int) -> int:
    """Connections reset by ``host:port`` (the VIP) toward the client, each once: the count for
    traffic whose connections the caller did not keep (a new connection per request)."""
    return len({(r.dst, r.dport) for r in resets if r.src == host and r.sport == port})


def sent_by_client(resets: Iterable[Reset], connections: Mapping[Ends, str]) -> int:
    """Connections the client itself reset (a reset from a client end to its server end), each once."""
    return len({ends for ends in map(_ends, resets) if ends in connections})


@dataclass(frozen=True)
class Agreement:
    """Resets the client's sockets reported next to connections reset on the wire."""

    socket: int
    wire: int

    @property
    def agree(self) -> bool:
        return self.socket == self.wire

    def __bool__(self) -> bool:
        return self.agree

    @property
    def message(self) -> str:
        s, w = self.socket, self.wire
        if s == w:
            return f"{s} connection(s) reset on the socket and {w} on the wire: they agree"
        if s > w:
            return (f"{s} connection(s) reset on the socket but only {w} on the wire: {s - w} failed "
                    "with a reset no RST explains (a local error, or the capture missed it)")
        return (f"{w} connection(s) reset on the wire but only {s} on the socket: {w - s} got an RST "
                "that the client never reported (closed already, or not watching)")

    def __str__(self) -> str:
        return self.message


def compare(socket_resets: int, wire_resets: int) -> Agreement:
    """Whether the socket-level and wire-level reset counts agree, with a message that says how."""
    return Agreement(socket_resets, wire_resets)


def resets_must_agree(socket_resets: int, wire_resets: int, which: str = "") -> Agreement:
    """``compare``, failing the test (AssertionError) when the counts differ; ``which`` (the
    connections they disagree on, when the caller knows them) ends the message."""
    agreement = compare(socket_resets, wire_resets)
    if not agreement:
        raise AssertionError(f"{agreement.message}{f': {which}' if which else ''}")
    return agreement


def reset_times(resets: Iterable[Reset], connections: Iterable[Ends]) -> dict[Ends, list[float]]:
    """For each of ``connections`` reset toward its client end, when each of its resets was seen."""
    wanted = set(connections)
    out: dict[Ends, list[float]] = {}
    for reset in resets:
        src, dst = _ends(reset)
        if (dst, src) in wanted:
            out.setdefault((dst, src), []).append(reset.time)
    return out
