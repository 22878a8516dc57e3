"""Idle flows and keepalive: an established flow keeps its backend while the LB remembers it; the
LB forgets it only after its idle timeout, and only a healthy-set change then moves (resets) it,
unless the Service has a reset at idle timeout; TCP keepalive shorter than the idle timeout
keeps flows through any number of changes. The timeout checked is the one the implementation
gives the Services (asked for, or its own), whatever its size; the backends send nothing on an
idle connection, so the client alone decides how long a flow idles."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fixtures.harness import MakeBackends, MakeFleet, MakeService, Measure
from lbconform.config import Timeouts
from lbconform.features import Feature
from lbconform.idle import IdlePlan, IdleProbe, IdleService, measure_idle_timeout
from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.kube.workload import QUIET_KIND
from lbconform.target import Target
from lbconform.traffic.capture import resets_must_agree
from lbconform.traffic.fleet import ALIVE, RESET, KeepAlive

IDLE, KEEPALIVE = Feature.IDLE_TIMEOUT, Feature.KEEPALIVE_SURVIVAL

CONNECTIONS = 30
#: Keepalive well inside any idle timeout.
KEEPALIVE_PROBES = KeepAlive(idle=2, interval=2, count=3)
#: Healthy-set changes a keepalive flow must live through, and its idle period in idle timeouts.
CHANGES, KEEPALIVE_TIMEOUTS = 3, 2


@pytest.fixture
def make_probe(make_backends: MakeBackends, make_service: MakeService, make_fleet: MakeFleet,
               idle_service: IdleService, target: Target) -> Callable[..., IdleProbe]:
    """``make_probe(*service_tweaks)``: quiet backends (no keepalive of their own, so a flow's idle
    time is the client's) on all nodes but one, behind a Service with externalTrafficPolicy Local
    and the idle timeout the implementation gives the suites; the healthy set changes when a pod
    joins or leaves the free node."""

    def make(*service_tweaks: Tweak) -> IdleProbe:
        lb = make_service(tweaks.traffic_policy_local, idle_service.tweak, *service_tweaks)
        lb.must_be_node_pool()
        backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()) - 1,
                                 kind=QUIET_KIND)
        lb.wait_for_serving(backends)
        return IdleProbe(lb, backends, make_fleet, CONNECTIONS)

    return make


@pytest.fixture
def probe(make_probe: Callable[..., IdleProbe]) -> IdleProbe:
    return make_probe()


@pytest.fixture
def plan(idle_service: IdleService) -> IdlePlan:
    """Below the timeout is the bracket's low end, beyond it its high end (``plan_idle_check``)."""
    return idle_service.plan


@pytest.mark.features(IDLE)
def test_flows_idle_below_the_timeout_survive_a_change(probe: IdleProbe, plan: IdlePlan) -> None:
    """Flows idle for less than the idle timeout keep their backend through a healthy-set change."""
    outcomes = probe.idle(plan.low, change=True, within=plan.low_at_most)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()


@pytest.mark.features(IDLE)
def test_flows_idle_beyond_the_timeout_survive_without_a_change(
        make_probe: Callable[..., IdleProbe], idle_reset: Callable[[bool], Tweak], plan: IdlePlan) -> None:
    """Flows idle for longer than the idle timeout still reach their backend when nothing changed,
    where the Service has no reset at idle timeout."""
    probe = make_probe(idle_reset(False))
    outcomes = probe.idle(plan.high, change=False)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()


@pytest.mark.features(IDLE)
def test_idled_out_flows_reset_when_asked(make_probe: Callable[..., IdleProbe],
                                          idle_reset: Callable[[bool], Tweak], plan: IdlePlan,
                                          measure: Measure) -> None:
    """With a reset at idle timeout (asked for, or the implementation's own), every flow idle
    beyond the timeout is answered with a TCP reset though nothing changed (as many on the wire as
    on the socket)."""
    probe = make_probe(idle_reset(True))
    outcomes = probe.idle(plan.high, change=False)
    measure("idle_timeout_resets", outcomes.get(RESET, 0) / CONNECTIONS, "ratio")
    assert outcomes == {RESET: CONNECTIONS}, probe.details()
    if probe.wire_resets is not None:
        resets_must_agree(outcomes.get(RESET, 0), probe.wire_resets, probe.disagreement())


@pytest.mark.features(IDLE)
def test_flows_idle_beyond_the_timeout_move_after_a_change(probe: IdleProbe, plan: IdlePlan,
                                                           measure: Measure) -> None:
    """Flows idle for longer than the idle timeout are hashed again after a healthy-set change, and
    those that move are reset (as many on the wire as on the socket): the phenomenon, measured."""
    outcomes = probe.idle(plan.high, change=True)
    measure("idle_resets_after_change", outcomes.get(RESET, 0) / CONNECTIONS, "ratio")
    assert outcomes.get(RESET, 0) > 0, probe.details()
    if probe.wire_resets is not None:
        resets_must_agree(outcomes.get(RESET, 0), probe.wire_resets, probe.disagreement())


@pytest.mark.features(IDLE)
def test_idle_timeout_measured(probe: IdleProbe, idle_service: IdleService, measure: Measure,
                               timeouts: Timeouts) -> None:
    """The idle timeout, measured from the client, is the one the Service has: inside the bracket
    around it (within 1 s below a minute, within 5 % from a minute up)."""
    declared = idle_service.seconds
    low, high = measure_idle_timeout(probe, declared, timeouts.idle_probe)
    measure("idle_timeout", (low + high) / 2, "s", declared=declared)
    assert low <= declared <= high, (low, high)


@pytest.mark.features(KEEPALIVE)
def test_keepalive_shorter_than_idle_survives_changes(probe: IdleProbe, idle_service: IdleService) -> None:
    """Flows with TCP keepalive shorter than the idle timeout survive idle periods of several idle
    timeouts through several healthy-set changes."""
    outcomes = probe.idle(idle_service.seconds * KEEPALIVE_TIMEOUTS, change=True, keepalive=KEEPALIVE_PROBES,
                          changes=CHANGES)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()
