"""Source ports for the harness's own probes, kept apart from those measured traffic gets.

Why this exists: a SYN that reaches a node before kube-proxy has rules for a load-balancer
address (MetalLB announces an address as soon as it is assigned; kube-proxy programs it once it
reads the Service's status) leaves a conntrack entry without NAT on that node for 120 s, and a
later connection from the same source port to the same address follows that entry and never
reaches a backend (kubernetes/kubernetes#101607). The harness's waits probe in exactly such
windows, and addresses are reused from test to test. Measured traffic (checks, the traffic
engines, Locust) takes its ports from the kernel's ephemeral range; probes bind ports outside
that range, so a wait never spoils a port a measured connection may get. Where no range is
left outside (a client whose ephemeral range spans nearly every port), probes take the kernel's
ports as before.
"""

from __future__ import annotations

import errno
import random
import threading
from collections.abc import Callable

#: Where the kernel keeps the ephemeral range (per network namespace).
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Fewer free ports than this outside the ephemeral range: probes use the kernel's ports.
MIN_PROBE_PORTS = 512
#: Errors of a bind or connect that mean "this source port is busy here" (a listener holds it, or
#: the same four-tuple is still in TIME_WAIT): try the next one.
BUSY = (errno.EADDRINUSE, errno.EADDRNOTAVAIL)
#: Ports a probe tries before it gives up on binding one.
ATTEMPTS = 16


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
    """Hands out the ports of ``ports`` in turn, from a random start (two test processes that
    share a client rarely walk the same ports at the same time; a busy one is skipped)."""

    def __init__(self, ports: range | None, start: int | None = None) -> None:
        self.ports = ports
        self._next = (random.randrange(len(ports)) if start is None else start) if ports else 0
        self._lock = threading.Lock()

    def take(self) -> int:
        """The next probe port (only for ``ports`` that are not None)."""
        assert self.ports, "no probe ports: let the kernel choose"
        with self._lock:
            port = self.ports[self._next % len(self.ports)]
            self._next += 1
        return port


_by_netns: dict[str | None, ProbePorts] = {}
_by_netns_lock = threading.Lock()


def for_client(netns: str | None, read_range: Callable[[], str]) -> ProbePorts:
    """The probe ports of one client (its network namespace's ephemeral range decides them)."""
    with _by_netns_lock:
        if netns not in _by_netns:
            try:
                ports = probe_range(parse_range(read_range()))
            except (OSError, ValueError):
                ports = None
            _by_netns[netns] = ProbePorts(ports)
        return _by_netns[netns]

