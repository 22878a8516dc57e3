"""Graceful termination: with the LB's time to unhealthy (u; under policy Cluster at least the
cluster's endpoint propagation, since every node forwards to the pod until its kube-proxy drops it)
below the preStop sleep (p) and that below the grace period (g), rolling updates fail no request
and in-flight requests finish; each broken inequality fails the requests it should, and the suite
says which one and by how much. Each test records u, p and g as configured; where one pod
terminates, also as observed."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeFleet, MakeService, Measure, Traffic
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.providers.base import NotSupported, Provider
from lbconform.termination import Observed, Ordering, observe_termination
from lbconform.traffic.capture import resets_must_agree
from lbconform.traffic.fleet import ALIVE

pytestmark = pytest.mark.features(Feature.GRACEFUL_TERMINATION)

#: Requests per second through a rollout, each on a new connection (as upstream's check sends).
RATE = 20
#: Requests per second while one badly configured pod terminates: enough that the seconds it is
#: exposed cannot pass without failures.
VIOLATION_RATE = 50
#: A request that takes this long (agnhost runs the command before it answers) is in flight
#: when its pod is deleted; the preStop must outlast it.
LONG_REQUEST_SECONDS = 6
CONNECTIONS = 30
#: Orderings with one inequality broken, by test id: the inequality as the suite names it, and
#: the ordering (u is the provider's, filled in by the test).
VIOLATIONS = {
    "p-below-u": ("p < u", Ordering(u=0, p=1, g=30, d=0)),
    "g-below-p": ("g < p", Ordering(u=0, p=20, g=1, d=0)),
    "no-prestop": ("no preStop", Ordering(u=0, p=None, g=30, d=0)),
}


@pytest.mark.parametrize("kind", ["deployment", "daemonset"])
@pytest.mark.parametrize("policy", ["Cluster", "Local"])
def test_rolling_update_fails_no_request(make_backends: MakeBackends, make_service: MakeService,
                                         traffic: Traffic, provider: Provider, measure: Measure,
                                         policy: str, kind: str) -> None:
    """A rolling update with u < p < g fails no request (new connection each) and resets none."""
    order = Ordering.for_rollout(provider, policy)
    backends = make_backends(*order.tweaks(), kind=kind)
    lb = make_service(tweaks.traffic_policy(policy))
    lb.wait_for_serving(backends)
    # A DaemonSet replaces one node's pod after the other, each once the old one is gone: the
    # rollout takes each pod's termination, as the ordering makes it, on top of the cluster's time.
    timeout = lb.target.timeouts.rollout + len(backends.names()) * order.serving_until
    result = traffic.through(lb, RATE, lambda t: backends.roll(timeout, t))
    order.record(measure)
    measure("rollout_failed_requests", result.result.failed, "requests")
    assert result.result.failed == 0, result.describe()
    if result.wire_resets is not None:
        resets_must_agree(result.socket_resets, result.wire_resets)


@pytest.mark.parametrize("broken", sorted(VIOLATIONS))
def test_ordering_violation_fails_requests(make_backends: MakeBackends, make_service: MakeService,
                                           traffic: Traffic, provider: Provider, measure: Measure,
                                           broken: str) -> None:
    """A pod terminating with one inequality broken (p < u, g < p, or no preStop with an app that
    stops at SIGTERM) fails requests while the LB still sends to its node; the suite names it."""
    inequality, wrong = VIOLATIONS[broken]
    declared = provider.declared_for("Local")
    order = wrong.with_u(declared.time_to_unhealthy)
    # Where the declared time to unhealthy does not outlast the app's serving (no health checks:
    # the LB follows the endpoints), only an app that stops at its deletion is sure to be exposed.
    if not order.exposed() and order.serving_until > 0:
        checks = (f"a time to unhealthy of {declared.time_to_unhealthy:g} s" if declared.health_checks
                  else "no health checks (its LB follows the endpoints)")
        raise NotSupported(f"the {provider.name} provider declares {checks}: the LB may stop sending to "
                           f"the pod's node before its app stops, {order.serving_until:g} s after "
                           f"deletion, so {inequality} need not fail a request")
    backends = make_backends(tweaks.one_per_node, *order.tweaks(), replicas=2)
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_serving(backends)
    victim = sorted(lb.answering_backends(backends))[0]
    observed: list[Observed] = []
    result = traffic.through(lb, VIOLATION_RATE, lambda t: observed.append(
        observe_termination(lb, backends, victim, t, lb.target.timeouts.rollout)))
    order.record(measure)
    observed[0].record(measure)
    measure("violation_exposed", order.exposed(), "s")
    measure("violation_failed_requests", result.result.failed, "requests")
    assert [b.split(":")[0] for b in order.broken()] == [inequality]
    assert result.result.failed > 0, f"{order.broken()[0]}, yet no request failed:\n{result.describe()}"


def test_in_flight_requests_finish_during_pre_stop(make_backends: MakeBackends, make_service: MakeService,
                                                   make_fleet: MakeFleet, provider: Provider) -> None:
    """Long requests in flight to a pod that is deleted finish during its preStop while the LB takes
    its node out, and no connection to any backend is reset (a next request on each still works)."""
    # Where one announcing node takes the traffic, taking the victim's node out moves the address.
    order = Ordering.for_rollout(provider, "Local").at_least(p=LONG_REQUEST_SECONDS + 4)
    backends = make_backends(tweaks.one_per_node, *order.tweaks())
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_serving(backends)
    fleet = make_fleet(lb, CONNECTIONS, timeout=LONG_REQUEST_SECONDS + lb.target.timeouts.request)
    victim = max(backends.names(), key=lambda b: sum(c.backend == b for c in fleet.connections))
    (victim_node,) = (node for node, pods in backends.by_node().items()
                      if victim in {p["metadata"]["name"] for p in pods})
    backends.delete_pod(victim)
    fleet.request(f"/shell?cmd=sleep%20{LONG_REQUEST_SECONDS}")
    # The next requests go once the LB has taken the victim's node out, the victim still in its preStop.
    lb.wait_for_taken_out(lb.node_ips({victim_node}))
    outcomes = fleet.request()
    assert outcomes == {ALIVE: CONNECTIONS}, [(c.backend, c.outcome, c.error) for c in fleet.connections
                                              if c.outcome != ALIVE]
    assert any(c.backend == victim for c in fleet.connections)
