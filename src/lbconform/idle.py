"""Probing a load balancer's idle timeout from the client.

A flow the LB has forgotten (idle past its timeout) is hashed again on its next packet; if the
healthy set changed meanwhile, some flows land on another backend, which answers a packet of a
connection it never saw with a reset. So: open connections, let them idle, change the healthy
set (a backend pod joins or leaves a node that has no other), and ask every connection again.
Flows idle less than the timeout must all survive; beyond it, some are reset. Bisecting the
idle time between two such probes measures the timeout.

A declared timeout minutes long (clouds: 4 min, 350 s) is not bisected from zero: the check
idles just below it and just above it, and the two probes together must fit in the named
timeout ``idle_probe``. Every backend's server-side TCP keepalive bounds what can be observed:
a backend that probes an idle connection every K seconds keeps the LB's entry fresh, so an idle
timeout longer than K never shows (agnhost, like every Go server, probes after 15 s).
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
#: Declared timeouts up to this are bisected; longer ones are bracketed (below, then above).
BISECT_UP_TO_SECONDS = 60.0
#: A bracket's distance from the declared value, as a fraction of it (at least the resolution).
BRACKET_FRACTION = 0.05
#: The idle time after which the backends' own TCP stack probes an idle connection: Go's
#: net/http server (agnhost netexec) enables keepalive with a 15 s idle on every accepted
#: connection, and nothing in agnhost turns it off.
BACKEND_SERVER_KEEPALIVE_SECONDS = 15.0


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


class CannotObserve(Exception):
    """The idle period a check needs cannot be observed or does not fit in its time budget."""


@dataclass(frozen=True)
class IdlePlan:
    """How a declared timeout is checked: ``bisect`` between ``low`` and ``high``, or idle at
    ``low`` (must keep every flow) and at ``high`` (must reset one) and stop."""

    bisect: bool
    low: float
    high: float

    @property
    def least_idle_seconds(self) -> float:
        """Idle time the plan spends at the least (the two bounds), before any change."""
        return self.low + self.high


def plan_idle_check(declared: float, budget: float,
                    server_keepalive: float = BACKEND_SERVER_KEEPALIVE_SECONDS) -> IdlePlan:
    """The check of ``declared``: bisected from half to one and a half times it when it is at most
    BISECT_UP_TO_SECONDS, else bracketed just below and just above it. ``CannotObserve`` when the
    backends' own keepalive would refresh the LB's entry before it could expire, or the bounds
    alone exceed ``budget`` (the ``idle_probe`` timeout)."""
    if declared <= BISECT_UP_TO_SECONDS:
        plan = IdlePlan(True, declared / 2, declared * 3 / 2)
    else:
        margin = max(RESOLUTION_SECONDS, declared * BRACKET_FRACTION)
        plan = IdlePlan(False, declared - margin, declared + margin)
    if declared >= server_keepalive:
        raise CannotObserve(
            f"a declared idle timeout of {declared:g}s cannot expire: the backends' server-side TCP "
            f"keepalive probes every connection idle {server_keepalive:g}s and keeps the LB's entry fresh")
    if plan.least_idle_seconds > budget:
        raise CannotObserve(f"checking a declared idle timeout of {declared:g}s idles at least "
                            f"{plan.least_idle_seconds:g}s: raise --timeout idle_probe above that")
    return plan


def measure_idle_timeout(probe: IdleProbe, declared: float, budget: float,
                         server_keepalive: float = BACKEND_SERVER_KEEPALIVE_SECONDS) -> tuple[float, float]:
    """The idle timeout as (longest idle that kept every flow, shortest that reset one), by the
    plan for ``declared`` (see ``plan_idle_check``): bisected, or bracketed. The bounds are probed
    first: if they do not behave, there is nothing to bisect."""
    plan = plan_idle_check(declared, budget, server_keepalive)
    if not plan.bisect:
        if probe.idle(plan.low, change=True) != {ALIVE: probe.connections}:
            return 0.0, plan.low
        above = probe.idle(plan.high, change=True) == {ALIVE: probe.connections}
        return (plan.high, float("inf")) if above else (plan.low, plan.high)
    return bisect_idle_timeout(probe, plan.low, plan.high)


def bisect_idle_timeout(probe: IdleProbe, low: float, high: float) -> tuple[float, float]:
    """Bisect the idle time between ``low`` and ``high`` until the timeout is known within
    RESOLUTION_SECONDS."""
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
