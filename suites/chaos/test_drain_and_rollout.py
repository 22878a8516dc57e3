"""Planned disruption under load: draining a node and restarting the backends, with the pods'
termination ordered right (u < p < g), fail no request and reset no connection, for the
experiment's own traffic and for Locust's."""

from __future__ import annotations

import pytest

from fixtures.chaos import MakeLoad, RunExperiment, record_load
from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.providers.base import Provider
from lbconform.termination import Ordering

#: A drain evicts every pod on its node, other tests' too, so it has the cluster alone; a rolling
#: restart replaces only its own backends and runs beside other tests.
pytestmark = pytest.mark.disruptive

#: New connections per second of the experiment's traffic.
RATE = 20
WARMUP_SECONDS = 5
#: After the disruption ended, traffic goes on this long: late failures show.
SETTLE_SECONDS = 5
#: Locust users (new connection per request, 4 requests per second each).
USERS = 5
ZERO = [0, 0]


@pytest.mark.features(Feature.NODE_DRAIN)
@pytest.mark.exclusive
@pytest.mark.xdist_group("chaos")
def test_node_drain_fails_no_request(make_backends: MakeBackends, make_service: MakeService,
                                     experiment: RunExperiment, make_load: MakeLoad, provider: Provider,
                                     measure: Measure) -> None:
    """Draining a node under load (eTP Local, u < p < g) fails no request and resets no connection."""
    order = Ordering.for_rollout(provider, "Local")
    backends = make_backends(*order.tweaks())
    lb = make_service(tweaks.traffic_policy_local)
    lb.wait_for_serving(backends)
    victim = sorted(backends.by_node())[-1]
    seconds = WARMUP_SECONDS + order.g + SETTLE_SECONDS
    load = make_load(lb, seconds, users=USERS)
    load.wait_for_phase("chaos", lb.target.timeouts.rollout)
    run = experiment("node-drain", namespace=lb.namespace, service=lb.name, node=victim, allowed_nodes=victim,
                     allow_disruptive=True, traffic_rate=RATE, warmup_seconds=WARMUP_SECONDS,
                     traffic_seconds=seconds, observe_seconds=SETTLE_SECONDS, drain_timeout=order.g + 30,
                     failure_tolerance=ZERO, reset_tolerance=ZERO)
    result = load.wait()
    order.record(measure)
    measure("drain_failed_requests", float(run.traffic["failed"]), "requests")
    record_load(measure, result, "drain_locust")
    assert run.run.completed, run.describe()
    assert result.failures == 0, result.failures_by_kind


@pytest.mark.features(Feature.ROLLING_UPDATE)
def test_rolling_restart_fails_no_request(make_backends: MakeBackends, make_service: MakeService,
                                          experiment: RunExperiment, make_load: MakeLoad, provider: Provider,
                                          measure: Measure) -> None:
    """A rolling restart of the backend Deployment under load (eTP Cluster, u < p < g) fails no
    request and resets no connection, with Locust's distributed workers (two pods) loading it too."""
    order = Ordering.for_rollout(provider, "Cluster")
    backends = make_backends(*order.tweaks())
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.wait_for_serving(backends)
    seconds = WARMUP_SECONDS + 3 * order.g + SETTLE_SECONDS
    load = make_load(lb, seconds, users=USERS, workers=2)
    load.wait_for_phase("chaos", lb.target.timeouts.rollout)
    run = experiment("rolling-restart", namespace=lb.namespace, service=lb.name, deployment=backends.name,
                     traffic_rate=RATE, warmup_seconds=WARMUP_SECONDS, traffic_seconds=seconds,
                     observe_seconds=SETTLE_SECONDS, rollout_timeout=int(lb.target.timeouts.rollout),
                     failure_tolerance=ZERO, reset_tolerance=ZERO)
    result = load.wait()
    order.record(measure)
    measure("rollout_failed_requests", float(run.traffic["failed"]), "requests")
    record_load(measure, result, "rollout_locust")
    assert run.run.completed, run.describe()
    assert result.failures == 0, result.failures_by_kind
