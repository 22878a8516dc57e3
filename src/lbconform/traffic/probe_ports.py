"""Source ports for the harness's own probes: apart from measured traffic's, and never reused
toward one address while a node may still hold conntrack state for them.

Why this exists: a SYN that reaches a node while kube-proxy has no rules for a load-balancer
address leaves a conntrack entry without NAT on that node for 120 s, and a later connection from
the same source port to the same address follows that entry and never reaches a backend
(kubernetes/kubernetes#101607). MetalLB announces an address as soon as it is assigned, and
kube-proxy programs it once it reads the Service's status; a deleted Service's address still
reaches its last node while the client's router remembers that node's MAC. The harness probes
in exactly such windows (waits for an address to serve, waits for a deleted one to stop), and
addresses are reused from test to test.

So probes bind ports outside the kernel's ephemeral range, which is all that measured traffic
(checks, the traffic engines, Locust) ever gets: a probe never spoils a measured connection's
port. And a probe port is not used again toward the same address and port until ``LINGER``
after the last packet its probe could send, by any harness process on this machine (xdist
workers, a run inside a test): an earlier probe never spoils a later one, so a wait for
"unreachable" cannot be satisfied by the harness's own stale entry. The turn of each destination
lives in a small file under ``STATE_DIR``, locked while a port is taken. Where no range is left
outside the kernel's (a client whose ephemeral range spans nearly every port), probes take the
kernel's ports.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: Where the kernel keeps the ephemeral range (per network namespace).
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Fewer free ports than this outside the ephemeral range: probes use the kernel's ports.
MIN_PROBE_PORTS = 512
#: Errors of a bind or connect that mean "this source port is busy here" (a listener holds it, or
#: the same four-tuple is still in TIME_WAIT): try the next one.
BUSY = (errno.EADDRINUSE, errno.EADDRNOTAVAIL)
#: Ports a probe tries before it gives up on binding one.
ATTEMPTS = 16
#: Seconds a probe port rests toward one address and port after the last packet its probe could
#: send (its timeout after it was taken): conntrack keeps an unanswered SYN (SYN_SENT) and a closed
#: connection (TIME_WAIT) 120 s after their last packet; 10 s more for clocks and lag.
LINGER = 130.0
#: The turns of every destination, shared by this user's harness processes on this machine.
STATE_DIR = Path(tempfile.gettempdir()) / f"lbconform-probe-ports-{os.getuid()}"

_CURSOR = struct.Struct("<q")
_STAMP = struct.Struct("<d")


def parse_range(text: str) -> tuple[int, int]:
    """``ip_local_port_range``'s two numbers."""
    low, high = (int(v) for v in text.split())
    return low, high


def probe_range(ephemeral: tuple[int, int]) -> range | None:
    """The ports above the ephemeral range (by convention no one's), or the unprivileged ones
    below it when too few are above; None when neither run is big enough."""
    low, high = ephemeral
    for ports in (range(high + 1, 65536), range(1024, low)):
        if len(ports) >= MIN_PROBE_PORTS:
            return ports
    return None


class ProbePorts:
    """The probe ports of one client: each destination walks ``ports`` in turn, and a port comes
    round again only ``LINGER`` after its last probe toward that destination could have sent its
    last packet (``take`` waits if the walk laps sooner, which needs more than len(ports) probes
    in that time)."""

    def __init__(self, ports: range, client: str, state_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.ports = ports
        self.state_dir = state_dir or STATE_DIR
        self.client = client
        self._clock, self._sleep = clock, sleep

    def take(self, host: str, port: int, lasts: float) -> int:
        """The next probe port toward ``host``:``port``, for a probe that sends its last packet
        within ``lasts`` seconds."""
        name = f"{self.client}_{host}_{port}_{self.ports.start}-{self.ports.stop}"
        path = self.state_dir / re.sub(r"[^A-Za-z0-9.-]", "_", name)
        size = _CURSOR.size + _STAMP.size * len(self.ports)
        # A new descriptor per take: flock then excludes this process's other threads too.
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the first take on this machine, or a cleaned temp dir
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            turn = int(_CURSOR.unpack(os.pread(fd, _CURSOR.size, 0))[0]) % len(self.ports)
            slot = _CURSOR.size + _STAMP.size * turn
            now = self._clock()
            last = float(_STAMP.unpack(os.pread(fd, _STAMP.size, slot))[0])
            # ``last`` is when the port's previous probe could last send; a clock set back waits no longer.
            wait = min(max(last + LINGER - now, 0.0), LINGER)
            os.pwrite(fd, _STAMP.pack(now + wait + lasts), slot)
            os.pwrite(fd, _CURSOR.pack(turn + 1), 0)
        finally:
            os.close(fd)
        if wait:
            self._sleep(wait)
        return self.ports[turn]


_by_netns: dict[str | None, ProbePorts | None] = {}
_by_netns_lock = threading.Lock()


def for_client(netns: str | None, read_range: Callable[[], str]) -> ProbePorts | None:
    """The probe ports of one client (its network namespace's ephemeral range decides them), or
    None when it has none and probes take the kernel's ports."""
    with _by_netns_lock:
        if netns not in _by_netns:
            try:
                ports = probe_range(parse_range(read_range()))
            except (OSError, ValueError):
                ports = None
            _by_netns[netns] = ProbePorts(ports, netns or "host") if ports else None
        return _by_netns[netns]
