"""Probing a load balancer's idle timeout from the client.

A flow the LB has forgotten (idle past its timeout) is hashed again on its next packet; if the
healthy set changed meanwhile, some flows land on another backend, which answers a packet of a
connection it never saw with a reset. So: open connections, let them idle, change the healthy
set (a backend pod joins or leaves a node that has no other), and ask every connection again.
Flows idle less than the timeout must all survive; beyond it, some are reset. Bisecting the
idle time between two such probes measures the timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer
from lbconform.traffic.capture import UNKNOWN, ResetCapture, attribute, capture_available
from lbconform.traffic.fleet import ALIVE, Fleet, KeepAlive
from lbconform.wait import Deadline

log = logging.getLogger(__name__)

MakeFleet = Callable[..., Fleet]
#: Bisection stops when the timeout is known to within this.
RESOLUTION_SECONDS = 2.0


class ChangeTooSlow(AssertionError):
    """The healthy-set change took longer than the idle period it had to fit in."""


@dataclass
class IdleProbe:
    lb: LoadBalancer
    backends: Workload
    make_fleet: MakeFleet
    connections: int
    extra: str | None = None
    last: Fleet | None = field(default=None, init=False)
    changes: int = field(default=0, init=False)
    #: Connections reset on the wire at the last probe's request (None: not measured, and why).
    wire_resets: int | None = field(default=None, init=False)
    wire_note: str = field(default="", init=False)

    @property
    def free_node(self) -> str:
        nodes = set(self.lb.target.node_addresses())
        used = {n for n, pods in self.backends.by_node().items()
                if any(p["metadata"]["name"] != self.extra for p in pods)}
        return sorted(nodes - used)[0]

    def change(self) -> None:
        """Add a backend on the free node, or remove the one added: the healthy set changes."""
        node = self.free_node
        if self.extra is None:
            self.changes += 1
            self.extra = f"extra-{self.changes}"
            self.backends.add_pod(node, self.extra, self.lb.target.timeouts.rollout)
        else:
            pod, self.extra = self.extra, None
            self.backends.delete_pod(pod)
            self.backends.wait_gone(pod, self.lb.target.timeouts.rollout)
        self.lb.wait_for_settled_pool(self.backends)

    def idle(self, seconds: float, *, change: bool, keepalive: KeepAlive | None = None,
             changes: int = 1) -> dict[str, int]:
        """Connections idle ``seconds`` (with ``changes`` healthy-set changes meanwhile), then asked
        again: the count of each outcome. Connections open while the free node has no backend, so
        that no change ever removes a backend a connection uses."""
        if self.extra is not None:
            self.change()
        reason = capture_available()
        self.wire_note = reason or ""
        # The wire is watched for the whole probe: a flow may be reset while idle (a server
        # keepalive probe answered through the wrong node), not only at the last request.
        capture = None if reason else ResetCapture(self.lb.target.client.netns, ports=(self.lb.port(),))
        if capture is not None:
            capture.start()
        try:
            outcomes = self._probe(seconds, change, keepalive, changes)
        finally:
            events = capture.stop() if capture is not None else []
        assert self.last is not None
        received = attribute(events, self.last.by_local_port())
        self.wire_resets = None if capture is None else sum(n for k, n in received.items() if k != UNKNOWN)
        log.info("idle %.1fs, change=%s: %s, wire resets %s", seconds, change, outcomes, self.wire_resets)
        return outcomes

    def _probe(self, seconds: float, change: bool, keepalive: KeepAlive | None,
               changes: int) -> dict[str, int]:
        fleet = self.make_fleet(self.lb, self.connections, keepalive)
        self.last = fleet
        idle_since = time.monotonic()
        end = Deadline(idle_since + seconds)
        for i in range(changes if change else 0):
            self.change()
            if end.expired():
                late = time.monotonic() - idle_since
                raise ChangeTooSlow(f"healthy-set change {i + 1} ended {late:.1f}s into an idle period of "
                                    f"{seconds:g}s")
        # The idle time is the quantity under test: nothing is sent until it has passed.
        time.sleep(end.remaining())
        return self.last.request()

    def details(self) -> list[tuple[str | None, str, str]]:
        if self.last is None:
            return []
        return [(c.backend, c.outcome, c.error) for c in self.last.connections if c.outcome != ALIVE]


def measure_idle_timeout(probe: IdleProbe, declared: float) -> tuple[float, float]:
    """Bisect the idle time between half and one and a half times ``declared`` until the timeout
    is known within RESOLUTION_SECONDS; returns (longest idle that kept every flow, shortest that
    reset one). The bounds are probed first: if they do not behave, there is nothing to bisect."""
    low, high = declared / 2, declared * 3 / 2
    if probe.idle(low, change=True) != {ALIVE: probe.connections}:
        return 0.0, low
    if probe.idle(high, change=True) == {ALIVE: probe.connections}:
        return high, float("inf")
    while high - low > RESOLUTION_SECONDS:
        mid = (low + high) / 2
        if probe.idle(mid, change=True) == {ALIVE: probe.connections}:
            low = mid
        else:
            high = mid
    return low, high
