"""Idle flows and keepalive: an established flow keeps its backend while the LB remembers it; the
LB forgets it only after its idle timeout, and only a healthy-set change then moves (resets) it,
unless the Service asks for a reset at idle timeout; TCP keepalive shorter than the idle timeout
keeps flows through any number of changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fixtures.harness import MakeBackends, MakeFleet, MakeService, Measure
from lbconform.config import Timeouts
from lbconform.features import Feature
from lbconform.idle import IdleProbe, measure_idle_timeout
from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.target import Target
from lbconform.traffic.capture import resets_must_agree
from lbconform.traffic.fleet import ALIVE, RESET, KeepAlive

IDLE, KEEPALIVE = Feature.IDLE_TIMEOUT, Feature.KEEPALIVE_SURVIVAL

#: The idle timeout the test Services ask for: short enough to measure in seconds, long enough
#: to tell from a defect that forgets flows after 5 s.
IDLE_SECONDS = 10
#: Idle periods below and beyond it. Beyond stays under 15 s, agnhost's (Go's) server-side TCP
#: keepalive: a probe from the server after the LB forgot the flow comes back through a NAT LB
#: unknown to the client, which resets the flow whatever the healthy set did.
BELOW, BEYOND = IDLE_SECONDS * 2 // 3, IDLE_SECONDS + 3
#: A slow healthy-set change stretches an idle period below the timeout up to this, no further.
BELOW_AT_MOST = IDLE_SECONDS - 2
CONNECTIONS = 30
#: Keepalive well inside the idle timeout.
KEEPALIVE_PROBES = KeepAlive(idle=2, interval=2, count=3)
#: Healthy-set changes a keepalive flow must live through.
CHANGES = 3


@pytest.fixture
def make_probe(make_backends: MakeBackends, make_service: MakeService, make_fleet: MakeFleet,
               idle_timeout: Callable[[int], Tweak], target: Target) -> Callable[..., IdleProbe]:
    """``make_probe(*service_tweaks)``: backends on all nodes but one (externalTrafficPolicy Local),
    a Service asking for IDLE_SECONDS; the healthy set changes when a pod joins or leaves the
    free node."""

    def make(*service_tweaks: Tweak) -> IdleProbe:
        backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()) - 1)
        lb = make_service(tweaks.traffic_policy_local, idle_timeout(IDLE_SECONDS), *service_tweaks)
        lb.must_be_node_pool()
        lb.wait_for_serving(backends)
        return IdleProbe(lb, backends, make_fleet, CONNECTIONS)

    return make


@pytest.fixture
def probe(make_probe: Callable[..., IdleProbe]) -> IdleProbe:
    return make_probe()


@pytest.mark.features(IDLE)
def test_flows_idle_below_the_timeout_survive_a_change(probe: IdleProbe) -> None:
    """Flows idle for less than the idle timeout keep their backend through a healthy-set change."""
    outcomes = probe.idle(BELOW, change=True, within=BELOW_AT_MOST)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()


@pytest.mark.features(IDLE)
def test_flows_idle_beyond_the_timeout_survive_without_a_change(probe: IdleProbe) -> None:
    """Flows idle for longer than the idle timeout still reach their backend when nothing changed
    (and the Service did not ask for a reset at idle timeout)."""
    outcomes = probe.idle(BEYOND, change=False)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()


@pytest.mark.features(IDLE)
def test_idled_out_flows_reset_when_asked(make_probe: Callable[..., IdleProbe], idle_reset: Tweak,
                                          measure: Measure) -> None:
    """With a reset at idle timeout asked for, every flow idle beyond the timeout is answered with a
    TCP reset on its next packet though nothing changed (as many on the wire as on the socket)."""
    probe = make_probe(idle_reset)
    outcomes = probe.idle(BEYOND, change=False)
    measure("idle_timeout_resets", outcomes.get(RESET, 0) / CONNECTIONS, "ratio")
    assert outcomes == {RESET: CONNECTIONS}, probe.details()
    if probe.wire_resets is not None:
        resets_must_agree(outcomes.get(RESET, 0), probe.wire_resets, probe.disagreement())


@pytest.mark.features(IDLE)
def test_flows_idle_beyond_the_timeout_move_after_a_change(probe: IdleProbe, measure: Measure) -> None:
    """Flows idle for longer than the idle timeout are hashed again after a healthy-set change, and
    those that move are reset (as many on the wire as on the socket): the phenomenon, measured."""
    outcomes = probe.idle(BEYOND, change=True)
    measure("idle_resets_after_change", outcomes.get(RESET, 0) / CONNECTIONS, "ratio")
    assert outcomes.get(RESET, 0) > 0, probe.details()
    if probe.wire_resets is not None:
        resets_must_agree(outcomes.get(RESET, 0), probe.wire_resets, probe.disagreement())


@pytest.mark.features(IDLE)
def test_idle_timeout_measured(probe: IdleProbe, measure: Measure, timeouts: Timeouts) -> None:
    """The idle timeout, measured from the client, is the one the Service asked for (within 2 s)."""
    low, high = measure_idle_timeout(probe, IDLE_SECONDS, timeouts.idle_probe)
    measure("idle_timeout", (low + high) / 2, "s", declared=float(IDLE_SECONDS))
    assert low <= IDLE_SECONDS <= high, (low, high)


@pytest.mark.features(KEEPALIVE)
def test_keepalive_shorter_than_idle_survives_changes(probe: IdleProbe) -> None:
    """Flows with TCP keepalive shorter than the idle timeout survive idle periods of several idle
    timeouts through several healthy-set changes."""
    outcomes = probe.idle(IDLE_SECONDS * 5 // 2, change=True, keepalive=KEEPALIVE_PROBES, changes=CHANGES)
    assert outcomes == {ALIVE: CONNECTIONS}, probe.details()
