"""Probing a load balancer's idle timeout from the client.

A flow the LB has forgotten (idle past its timeout) is hashed again on its next packet; if the
healthy set changed meanwhile, some flows land on another backend, which answers a packet of a
connection it never saw with a reset. So: open connections, let them idle, change the healthy
set (a backend pod joins or leaves a node that has no other), and ask every connection again.
Flows idle less than the timeout must all survive; beyond it, some are reset.

The check probes just below and just above the declared timeout first (within the resolution,
or 5 % of a timeout minutes long, as on clouds); only a timeout outside that bracket is searched
for, by bisection, so that the report says what it is. A change takes what the implementation
takes (pod start, readiness, its health checks): one that outlasts the idle time asked for
stretches the idle time, and the probe measures what it was. The probes together must fit in the
named timeout ``idle_probe``. The backends must send nothing on an idle connection: one that
probes it every K seconds (TCP keepalive) keeps the LB's entry fresh, so an idle timeout longer
than K never shows (agnhost, like every Go server, probes after 15 s). The idle suites' backends
are the quiet server (``lbconform.kube.workload.QUIET_KIND``), so any declared timeout shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.kube.manifests import Tweak
from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer
from lbconform.traffic.capture import Ends, ResetCapture, capture_available, reset_times
from lbconform.traffic.fleet import ALIVE, RESET, Fleet, KeepAlive
from lbconform.wait import Deadline

log = logging.getLogger(__name__)

MakeFleet = Callable[..., Fleet]
#: Bisection stops when the timeout is known to within this.
RESOLUTION_SECONDS = 2.0
#: Declared timeouts below this are searched for when they are outside the bracket; longer ones
#: (clouds' minutes) are only bracketed, below and then above: a bisection would idle for hours.
BISECT_BELOW_SECONDS = 60.0
#: A bracket's distance from the declared value, as a fraction of it (at least half the
#: resolution): 57 s and 63 s for 60 s, 228 s and 252 s for Azure's 4 minutes.
BRACKET_FRACTION = 0.05


class ChangeTooSlow(Exception):
    """The healthy-set changes took longer than the idle time the probe could still learn from:
    the check could not be made (an error, not a failure of the LB)."""


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
    #: How long the last probe's connections actually idled before they were asked again.
    idled: float = field(default=0.0, init=False)
    #: When the last probe asked its connections again (epoch seconds), and when each client
    #: end got a reset on the wire: what ``disagreement`` reads.
    asked_at: float = field(default=0.0, init=False)
    wire_reset_times: dict[Ends, list[float]] = field(default_factory=dict, init=False)

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
             changes: int = 1, within: float | None = None) -> dict[str, int]:
        """Connections idle ``seconds`` (with ``changes`` healthy-set changes meanwhile), then asked
        again: the count of each outcome. Connections open while the free node has no backend, so
        that no change ever removes a backend a connection uses.

        A change takes what the implementation takes (pod start, readiness, its health checks),
        so the idle time is at least ``seconds``: changes that end later stretch it to their end
        (``idled`` says how long it was), and ``ChangeTooSlow`` when they end after ``within``
        seconds (default ``seconds``), beyond which the probe would not answer its question."""
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
            outcomes = self._probe(seconds, change, keepalive, changes,
                                   seconds if within is None else max(seconds, within))
        finally:
            events = capture.stop() if capture is not None else []
        assert self.last is not None
        # The connections reset toward the client, each once (``capture.attribute``'s count
        # without its split by backend, which the probe does not report).
        self.wire_reset_times = reset_times(events, self.last.by_ends())
        self.wire_resets = None if capture is None else len(self.wire_reset_times)
        which = self.disagreement()
        if which:
            log.warning("wire and socket disagree: %s", which)
        log.info("idle %.1fs (asked %.1fs), change=%s: %s, wire resets %s", self.idled, seconds, change,
                 outcomes, self.wire_resets)
        return outcomes

    def _probe(self, seconds: float, change: bool, keepalive: KeepAlive | None,
               changes: int, within: float) -> dict[str, int]:
        fleet = self.make_fleet(self.lb, self.connections, keepalive)
        self.last = fleet
        idle_since = time.monotonic()
        end, limit = Deadline(idle_since + seconds), Deadline(idle_since + within)
        for i in range(changes if change else 0):
            self.change()
            if limit.expired():
                late = time.monotonic() - idle_since
                raise ChangeTooSlow(f"healthy-set change {i + 1} ended {late:.1f}s into an idle period "
                                    f"that had to stay under {within:g}s (asked: {seconds:g}s): the "
                                    "implementation's health checks are too slow for this probe")
        # The idle time is the quantity under test: nothing is sent until it has passed.
        time.sleep(end.remaining())
        self.idled = time.monotonic() - idle_since
        self.asked_at = time.time()
        return fleet.request()

    def disagreement(self) -> str:
        """The connections the wire and the socket disagree on: reset on the wire but ended
        otherwise, or failed with a reset no RST explains; each with its client port, outcome,
        error and times (seconds from the moment they were asked again)."""
        if self.last is None:
            return ""

        def at(t: float | None) -> str:
            return "never" if t is None else f"{t - self.asked_at:+.2f}s"

        out = []
        for c in self.last.connections:
            rst = self.wire_reset_times.get((c.local, c.remote), [])
            if bool(rst) != (c.outcome == RESET):
                out.append(f"port {c.local[1]} {c.outcome} ({c.error or 'no error'}) ended {at(c.ended_at)}, "
                           f"RST on the wire at {', '.join(at(t) for t in rst) or 'none'}")
        return "; ".join(out)

    def details(self) -> list[tuple[str | None, str, str]]:
        if self.last is None:
            return []
        return [(c.backend, c.outcome, c.error) for c in self.last.connections if c.outcome != ALIVE]


class CannotObserve(Exception):
    """The idle period a check needs cannot be observed or does not fit in its time budget."""


@dataclass(frozen=True)
class IdlePlan:
    """How a declared timeout is checked: idle at ``low`` (every flow must live) and at ``high``
    (one must be reset), the bracket around it. When the timeout is not inside it, ``search``
    says whether it is then bisected between ``floor`` and ``ceiling``, to measure what it is.
    The idle suites' other checks idle at the same two bounds: ``low`` for "below the timeout"
    (a slow change may stretch it up to ``low_at_most``), ``high`` for "beyond it"."""

    declared: float
    low: float
    high: float
    search: bool
    floor: float
    ceiling: float

    @property
    def low_at_most(self) -> float:
        """The longest a "below the timeout" idle period may be stretched by slow changes: the
        resolution short of the declared value (the LB's timer and this machine's clock are not
        exact to the millisecond), never less than ``low``."""
        return max(self.low, self.declared - RESOLUTION_SECONDS)

    @property
    def least_idle_seconds(self) -> float:
        """Idle time the plan spends at the least (the two bounds), before any change."""
        return self.low + self.high


@dataclass(frozen=True)
class IdleService:
    """What the idle suites' Services get: the plan for their idle timeout, and the tweak that
    gives it to them (none where it is the implementation's fixed one)."""

    plan: IdlePlan
    tweak: Tweak

    @property
    def seconds(self) -> float:
        return self.plan.declared


def plan_idle_check(declared: float, budget: float) -> IdlePlan:
    """The check of ``declared``: the bracket is within half the resolution of it, or 5 % of it
    for a timeout of a minute or more (57 s and 63 s for 60 s); a timeout below
    BISECT_BELOW_SECONDS outside it is then searched between half of it and one and a half times
    it. ``CannotObserve`` when the bracket alone exceeds ``budget`` (the ``idle_probe`` timeout)."""
    margin = max(RESOLUTION_SECONDS / 2, declared * BRACKET_FRACTION)
    plan = IdlePlan(declared, declared - margin, declared + margin, declared < BISECT_BELOW_SECONDS,
                    declared / 2, max(declared + margin, declared * 3 / 2))
    if plan.least_idle_seconds > budget:
        raise CannotObserve(f"checking a declared idle timeout of {declared:g}s idles at least "
                            f"{plan.least_idle_seconds:g}s: raise --timeout idle_probe above that")
    return plan


def measure_idle_timeout(probe: IdleProbe, declared: float, budget: float) -> tuple[float, float]:
    """The idle timeout as (longest idle that kept every flow, shortest that reset one), by the
    plan for ``declared`` (see ``plan_idle_check``). The bounds are the idle times the probes
    actually took (a slow change stretches one). The bracket's low probe must end before the
    declared value, so that a reset there still says the flows were forgotten too early."""
    plan = plan_idle_check(declared, budget)
    if not _all_alive(probe, plan.low, within=declared):
        below = probe.idled
        if not plan.search:
            return 0.0, below
        if not _all_alive(probe, plan.floor, within=(plan.floor + below) / 2):
            return 0.0, probe.idled
        return bisect_idle_timeout(probe, probe.idled, below)
    low = probe.idled
    if not _all_alive(probe, plan.high, within=plan.high):
        return low, probe.idled
    if not plan.search:
        return probe.idled, float("inf")
    low = probe.idled
    if _all_alive(probe, plan.ceiling, within=plan.ceiling):
        return probe.idled, float("inf")
    return bisect_idle_timeout(probe, low, probe.idled)


def bisect_idle_timeout(probe: IdleProbe, low: float, high: float) -> tuple[float, float]:
    """Bisect between ``low`` (every flow lived) and ``high`` (one was reset) until the timeout is
    known within RESOLUTION_SECONDS. Each probe must narrow the bracket by at least a quarter of
    the resolution: a change slower than that is ``ChangeTooSlow``."""
    while high - low > RESOLUTION_SECONDS:
        if _all_alive(probe, (low + high) / 2, within=high - RESOLUTION_SECONDS / 4):
            low = probe.idled
        else:
            high = probe.idled
    return low, high


def _all_alive(probe: IdleProbe, seconds: float, *, within: float) -> bool:
    return probe.idle(seconds, change=True, within=within) == {ALIVE: probe.connections}
