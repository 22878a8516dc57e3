"""Churn under traffic: kube-proxy restarting on a node, the backends scaled to zero and back,
and backends crashing and coming back. With the termination ordered right, a kube-proxy
restart fails nothing; after a scale back to full, nothing fails once the pool recovered;
crashing backends cost a bounded number of requests while they are replaced."""

from __future__ import annotations

import pytest

from fixtures.chaos import RunExperiment
from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.providers.base import Provider
from lbconform.target import Target
from lbconform.termination import Ordering

#: Restarting kube-proxy changes what every test sees on that node, so that test has the cluster
#: alone; the others disturb only their own backends and run beside other tests.
pytestmark = pytest.mark.disruptive

#: New connections per second of the experiment's traffic.
RATE = 20
WARMUP_SECONDS = 5
ZERO = [0, 0]
#: Backend crashes (agnhost /exit) and how many failed requests each may cost: requests that
#: kube-proxy sends to the crashed pod until its endpoint leaves, about a second at RATE over
#: the three backends, with room.
FLAP_CYCLES = 2
FAILURES_PER_CRASH = 15


@pytest.mark.features(Feature.NODE_FAILURE)
@pytest.mark.exclusive
@pytest.mark.xdist_group("chaos")
def test_kube_proxy_restart_fails_no_request(make_backends: MakeBackends, make_service: MakeService,
                                             experiment: RunExperiment, provider: Provider, target: Target,
                                             measure: Measure) -> None:
    """Restarting kube-proxy on a node under load (eTP Cluster) fails no request and resets no
    connection: its rules stay in place while it restarts, and the LB's check of the node only
    moves new connections elsewhere."""
    order = Ordering.correct(provider.declared_for("Cluster"))
    backends = make_backends(*order.tweaks())
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.wait_for_serving(backends)
    node = sorted(target.node_addresses())[-1]
    run = experiment("kube-proxy-restart", namespace=lb.namespace, service=lb.name, node=node,
                     allowed_nodes=node, allow_disruptive=True, traffic_rate=RATE,
                     warmup_seconds=WARMUP_SECONDS, traffic_seconds=25, failure_tolerance=ZERO,
                     reset_tolerance=ZERO)
    measure("kube_proxy_restart_failed_requests", float(run.traffic["failed"]), "requests")
    assert run.run.completed, run.describe()


@pytest.mark.features(Feature.BACKEND_CHURN)
def test_scale_to_zero_and_back_recovers(make_backends: MakeBackends, make_service: MakeService,
                                         experiment: RunExperiment, measure: Measure) -> None:
    """Scaled to zero and back under load, the Service serves every request again once the
    backends are back: no failure after the recovery window (failures while at zero are
    expected and counted)."""
    backends = make_backends()
    lb = make_service()
    lb.wait_for_serving(backends)
    run = experiment("scale-to-zero", namespace=lb.namespace, service=lb.name, deployment=backends.name,
                     replicas=3, traffic_rate=RATE, warmup_seconds=WARMUP_SECONDS, traffic_seconds=45,
                     zero_seconds=5, rollout_timeout=int(lb.target.timeouts.rollout),
                     failure_tolerance=ZERO, reset_tolerance=ZERO)
    measure("scale_to_zero_failed_requests", float(run.traffic["failed"]), "requests")
    assert run.run.completed, run.describe()


@pytest.mark.features(Feature.BACKEND_CHURN)
def test_backend_crashes_cost_bounded_failures(make_backends: MakeBackends, make_service: MakeService,
                                               experiment: RunExperiment, measure: Measure) -> None:
    """Backends crashing and restarting under load cost at most a few failed requests per crash,
    and every backend serves again after."""
    backends = make_backends()
    lb = make_service()
    lb.wait_for_serving(backends)
    budget = [0, FLAP_CYCLES * FAILURES_PER_CRASH]
    run = experiment("backend-flap", namespace=lb.namespace, service=lb.name, traffic_rate=RATE,
                     warmup_seconds=WARMUP_SECONDS, traffic_seconds=60, flap_cycles=FLAP_CYCLES,
                     failure_tolerance=budget, reset_tolerance=budget)
    measure("backend_flap_failed_requests", float(run.traffic["failed"]), "requests",
            declared=float(budget[1]))
    assert run.run.completed, run.describe()
    lb.wait_for_backends(backends.names())
