"""Node failure under load: a node that dies as a power cut kills it (its processes and its
link gone) costs failed requests only until the LB stops sending new connections to it; the
LB's detection time is measured from the client's side and from the LB's healthy set."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from fixtures.chaos import HealthyWatch, RunExperiment
from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer
from lbconform.providers.base import Provider
from lbconform.target import Target

pytestmark = [pytest.mark.features(Feature.NODE_FAILURE), pytest.mark.disruptive, pytest.mark.exclusive,
              pytest.mark.xdist_group("chaos")]

#: New connections per second through the experiment.
RATE = 20
WARMUP_SECONDS = 5
#: Traffic after the kill: long enough that an LB still sending to the dead node well beyond
#: its declared detection time shows it: OBSERVE_SECONDS, or the window and OBSERVE_BEYOND_WINDOW
#: more where the window is long (kube-vip's lease takes 22.4 s).
OBSERVE_SECONDS = 20
OBSERVE_BEYOND_WINDOW = 10
#: The failure budget is this many times the expected count: the dead node's share of the pool
#: (new connections hash evenly over it) of every request sent within the detection window.
BUDGET_MARGIN = 2


@pytest.mark.parametrize("policy", ["Cluster", "Local"])
def test_killed_node_fails_requests_only_until_detected(
        make_backends: MakeBackends, make_service: MakeService, experiment: RunExperiment,
        watch_healthy: Callable[[LoadBalancer], HealthyWatch], provider: Provider, target: Target,
        measure: Measure, policy: str) -> None:
    """A node killed under load leaves the LB's healthy set within its declared time to unhealthy
    (plus one check interval), and fails no more new connections than the dead node's share of
    that window (twice over). Where one announcing node takes the traffic, that node is killed:
    its address answers from another node within the declared failover time."""
    declared = provider.declared_for(policy)
    victim = sorted(target.node_addresses())[-1]
    # Local: a backend on every node, the victim's dies with it. Cluster: none on the victim,
    # so that every failure is the LB's (kube-proxy elsewhere never routes to a dead pod).
    backends = (make_backends(tweaks.one_per_node, replicas=len(target.node_addresses())) if policy == "Local"
                else make_backends(tweaks.avoid_node(victim), replicas=2))
    lb: LoadBalancer = make_service(tweaks.traffic_policy(policy))
    lb.must_be_node_pool()
    lb.wait_for_serving(backends)
    share = 1 / len(lb.expected_pool(backends))
    if lb.one_entry_node():
        # One announcing node takes every new connection: that is the node whose death matters.
        victim = announcing_node(lb, backends, target, policy)
        share = 1.0
    window = declared.node_failure_window
    observe = max(OBSERVE_SECONDS, math.ceil(window) + OBSERVE_BEYOND_WINDOW)
    budget = [0, math.ceil(BUDGET_MARGIN * RATE * window * share)]
    watch = watch_healthy(lb)
    run = experiment("node-kill", namespace=lb.namespace, service=lb.name, node=victim, allowed_nodes=victim,
                     allow_disruptive=True, traffic_rate=RATE, warmup_seconds=WARMUP_SECONDS,
                     observe_seconds=observe, traffic_seconds=WARMUP_SECONDS + observe + 2,
                     failure_tolerance=budget, reset_tolerance=budget)
    watch.stop()
    killed = run.started("kill-node")
    failures = run.failures_after(killed)
    stopped_after = max((f["at"] for f in failures), default=killed) - killed
    late = [f for f in failures if f["at"] - killed > window]
    dropped = watch.left_at(target.node_addresses()[victim], killed)
    measure("node_kill_failed_requests", float(run.traffic["failed"]), "requests", declared=float(budget[1]))
    measure("node_kill_resets", float(run.traffic["resets"]), "connections")
    measure("node_kill_last_failure_after", stopped_after, "s", declared=window)
    measure("node_kill_failures_after_window", float(len(late)), "requests")
    if dropped is not None:  # a time to unhealthy is declared only where there are health checks
        measure("node_kill_lb_dropped_node_after", dropped - killed, "s",
                declared=declared.time_to_unhealthy if declared.health_checks else None)
    assert run.run.completed, run.describe()
    assert len(failures) == run.traffic["failed"], "requests failed before the node was killed"
    if watch.seen and declared.health_checks:  # the LB's healthy set: when it took the node out, as it says
        kept = "throughout" if dropped is None else f"{dropped - killed:.1f}s"
        assert dropped is not None and dropped - killed <= window, (
            f"the LB kept {victim} in its healthy set {kept} after the kill, beyond the declared "
            f"{window:g}s: {run.describe()}")
    else:  # the client's view (where there are no health checks, the pool only says who announces)
        assert stopped_after <= window, (f"new connections failed {stopped_after:.1f}s after the kill, "
                                         f"beyond the declared {window:g}s: {run.describe()}")


def announcing_node(lb: LoadBalancer, backends: Workload, target: Target, policy: str) -> str:
    """The node that announces the Service's address, with no backend of a Cluster Service on it
    (moved off if the election fell on one of theirs: every failure must be the LB's)."""
    def announcer() -> str:
        return next(iter(lb.healthy_nodes()))

    node = announcer()
    if policy == "Cluster" and node in backends.by_node():
        backends.update(tweaks.avoid_node(node))
        backends.wait_rolled_out(lb.target.timeouts.rollout)
        lb.wait_for_serving(backends)
        moved = announcer()
        assert moved == node, (f"the announcing node moved from {node} to {moved} when the backends "
                               "moved off it: a Cluster Service's announcer depends on no endpoint's node")
    return node
