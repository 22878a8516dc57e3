"""Backend pool: what the implementation's own API says it sends to equals what the cluster says
it should (the ready pods, or the right nodes), and how far behind it follows changes."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.convergence import Lags, follow, percentile
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer

POOL, POD_POOL = Feature.BACKEND_POOL, Feature.POD_BACKEND_POOL
#: Scaling from this many backends up by BURST and back makes 2 x BURST pod changes.
BASE, STEP, BURST = 2, 3, 25


def record_lags(measure: Measure, name: str, lags: Lags, lb: LoadBalancer) -> None:
    values = lags.all()
    assert values, "no pool change was observed"
    for label, q in (("p50", 50), ("p95", 95), ("max", 100)):
        measure(f"{name}_{label}", percentile(values, q), "s", declared=None)
    assert max(values) <= lb.target.timeouts.endpoint_lag, (
        f"a pool change took {max(values):.2f}s, beyond endpoint_lag {lb.target.timeouts.endpoint_lag:g}s: "
        f"added {lags.added}, removed {lags.removed}")


def follow_scale(lb: LoadBalancer, backends: Workload, replicas: int) -> Lags:
    """Scale and time the pool's changes: the cluster has ``rollout`` to start or remove the pods,
    and the pool ``endpoint_lag`` from each change of the ready endpoints to show it."""
    timeouts = lb.target.timeouts
    return follow(lambda: backends.scale(replicas), lb.ready_endpoint_ips, lb.healthy, replicas,
                  settle=timeouts.rollout, lag=timeouts.endpoint_lag,
                  description=f"the pool of {lb.namespace}/{lb.name} to follow a scale to {replicas}")


@pytest.mark.features(POOL, Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER)
def test_cluster_policy_pool_is_every_node(make_backends: MakeBackends, make_service: MakeService) -> None:
    """For externalTrafficPolicy=Cluster, a node pool holds every node, all healthy (or, where the
    implementation declares that one announcing node takes the traffic, one of them)."""
    make_backends()
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.must_be_node_pool()
    lb.wait_for_pool(lb.node_ips())
    assert lb.pool_matches(lb.node_ips()), lb.pool()


@pytest.mark.features(POOL, Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL)
def test_local_policy_pool_sends_to_nodes_with_endpoints(make_backends: MakeBackends,
                                                         make_service: MakeService) -> None:
    """For externalTrafficPolicy=Local, a node pool sends to exactly the nodes with a ready endpoint
    (or, where one announcing node takes the traffic, to one of them)."""
    backends = make_backends(tweaks.one_per_node, replicas=2)
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_pool(lb.node_ips(set(backends.by_node())))


@pytest.mark.features(POD_POOL)
def test_pod_pool_equals_ready_pod_ips(make_backends: MakeBackends, make_service: MakeService,
                                       pod_pool: Tweak) -> None:
    """A pod pool holds exactly the ready pods' IPs."""
    backends = make_backends()
    lb = make_service(pod_pool)
    lb.wait_for_pool(backends.ips())


@pytest.mark.features(POD_POOL)
def test_pod_pool_follows_scale_up(make_backends: MakeBackends, make_service: MakeService, pod_pool: Tweak,
                                   measure: Measure) -> None:
    """After a scale-up, every new ready pod joins the pool within endpoint_lag; the lag is measured."""
    backends = make_backends(replicas=BASE)
    lb = make_service(pod_pool)
    lb.wait_for_pool(backends.ips())
    record_lags(measure, "pool_add_lag", follow_scale(lb, backends, BASE + STEP), lb)


@pytest.mark.features(POD_POOL)
def test_pod_pool_follows_scale_down(make_backends: MakeBackends, make_service: MakeService, pod_pool: Tweak,
                                     measure: Measure) -> None:
    """After a scale-down, every removed pod leaves the pool within endpoint_lag; the lag is measured."""
    backends = make_backends(replicas=BASE + STEP)
    lb = make_service(pod_pool)
    lb.wait_for_pool(backends.ips())
    record_lags(measure, "pool_remove_lag", follow_scale(lb, backends, BASE), lb)


@pytest.mark.features(POD_POOL)
def test_pod_pool_follows_a_burst_of_changes(make_backends: MakeBackends, make_service: MakeService,
                                             pod_pool: Tweak, measure: Measure) -> None:
    """Through a burst of 50 pod changes (25 up, 25 down) the pool follows each within endpoint_lag."""
    backends = make_backends(replicas=BASE)
    lb = make_service(pod_pool)
    lb.wait_for_pool(backends.ips())
    up = follow_scale(lb, backends, BASE + BURST)
    down = follow_scale(lb, backends, BASE)
    record_lags(measure, "pool_burst_lag", Lags({**up.added}, {**down.removed}), lb)
