"""Health-check transitions: how fast a node leaves and rejoins the healthy set, measured against
the provider's declared interval x threshold, and what counts as unhealthy."""

from __future__ import annotations

import time

import pytest

from fixtures.harness import MakeBackends, MakeService, Measure, NodeMarker
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.lb import OBSERVE_INTERVAL
from lbconform.providers.base import Declared, Provider
from lbconform.target import Target
from lbconform.traffic import checks
from lbconform.traffic.client import Client
from lbconform.wait import Bound

HC, LOCAL, CLUSTER = (Feature.HEALTH_CHECK_TRANSITIONS, Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL,
                      Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER)

#: kube-proxy answers its health check ports from state it updates on each sync (at most its
#: 1 s minSyncPeriod after a slice or node change).
KUBE_PROXY_LAG = 1.0
#: A terminating backend keeps serving this long, while the LB must take its node out.
PRE_STOP_SECONDS, GRACE_SECONDS = 15, 30
#: New connections that must all avoid a node the LB took out.
CONNECTIONS = 20
#: The pod whose termination leaves its node with no ready endpoint.
VICTIM = "terminating-backend"


def allowed(declared: Declared, transition: float, name: str) -> Bound:
    """The most a transition may take: the declared checks, one more interval for the phase of
    the check cycle and a check's own timeout, kube-proxy's lag, and the resolution at which the
    harness sees the transition end."""
    return Bound(((f"declared {name}", transition), ("one check interval", declared.health_check_interval),
                  ("kube-proxy's sync lag", KUBE_PROXY_LAG), ("the observers' poll", OBSERVE_INTERVAL)))


@pytest.mark.features(HC, LOCAL)
def test_unhealthy_after_last_local_endpoint_gone(make_backends: MakeBackends, make_service: MakeService,
                                                  provider: Provider, measure: Measure) -> None:
    """A node whose last local endpoint is gone leaves the healthy set within interval x threshold."""
    declared = provider.declared_for("Local")
    backends = make_backends(tweaks.one_per_node, replicas=2)
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_healthy(lb.node_ips(set(backends.by_node())))
    backends.scale(1)
    gone_at, left = lb.wait_for_endpoint_nodes(1)
    unhealthy_at = lb.wait_for_healthy(lb.node_ips(left))
    measure("time_to_unhealthy", unhealthy_at - gone_at, "s", declared=declared.time_to_unhealthy)
    bound = allowed(declared, declared.time_to_unhealthy, "time to unhealthy")
    assert unhealthy_at - gone_at <= bound.total, f"took {unhealthy_at - gone_at:.2f}s, allowed {bound}"


@pytest.mark.features(HC, LOCAL)
def test_healthy_after_new_local_endpoint_ready(make_backends: MakeBackends, make_service: MakeService,
                                                provider: Provider, measure: Measure) -> None:
    """A node that gets a ready local endpoint joins the healthy set within interval x healthy threshold."""
    declared = provider.declared_for("Local")
    backends = make_backends(tweaks.one_per_node, replicas=1)
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_healthy(lb.node_ips(set(backends.by_node())))
    backends.scale(2)
    ready_at, nodes = lb.wait_for_endpoint_nodes(2, lb.target.timeouts.rollout)
    healthy_at = lb.wait_for_healthy(lb.node_ips(nodes))
    measure("time_to_healthy", healthy_at - ready_at, "s", declared=declared.time_to_healthy)
    bound = allowed(declared, declared.time_to_healthy, "time to healthy")
    assert healthy_at - ready_at <= bound.total, f"took {healthy_at - ready_at:.2f}s, allowed {bound}"


@pytest.mark.features(HC, LOCAL)
def test_only_terminating_endpoints_fail_the_health_check(make_backends: MakeBackends,
                                                          make_service: MakeService, client: Client,
                                                          target: Target, measure: Measure) -> None:
    """A node whose only local endpoint is terminating (still serving in preStop) leaves the healthy
    set, and new connections stop reaching that endpoint."""
    declared = target.provider.declared_for("Local")
    # The terminating endpoint is a pod of its own on the one node the Deployment leaves free: no
    # controller replaces it, so the nodes that keep an endpoint are known in advance.
    backends = make_backends(tweaks.one_per_node, tweaks.pre_stop_sleep(PRE_STOP_SECONDS),
                             tweaks.grace_period(GRACE_SECONDS), replicas=len(target.node_addresses()) - 1)
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    kept = set(backends.by_node())
    free = sorted(set(target.node_addresses()) - kept)[0]
    backends.add_pod(free, VICTIM, target.timeouts.rollout)
    lb.wait_for_healthy(lb.node_ips(kept | {free}))
    backends.delete_pod(VICTIM)
    terminating_at, _ = lb.wait_for_endpoint_nodes(kept)
    unhealthy_at = lb.wait_for_healthy(lb.node_ips(kept))
    measure("time_to_unhealthy_terminating", unhealthy_at - terminating_at, "s",
            declared=declared.time_to_unhealthy)
    assert lb.endpoint_serving(VICTIM), "the terminating endpoint stopped serving before the check"
    answers = [checks.answer_or_failure(client, lb.vip, lb.port()) for _ in range(CONNECTIONS)]
    assert VICTIM not in answers and set(answers) <= backends.names(), answers


@pytest.mark.exclusive(from_first_change=True)
@pytest.mark.features(HC, CLUSTER)
def test_node_to_be_deleted_leaves_cluster_policy_pool(make_backends: MakeBackends, make_service: MakeService,
                                                       mark_node: NodeMarker, provider: Provider,
                                                       measure: Measure) -> None:
    """A node tainted ToBeDeletedByClusterAutoscaler fails kube-proxy's /healthz and leaves the healthy
    set of externalTrafficPolicy=Cluster Services."""
    declared = provider.declared_for("Cluster")
    make_backends()
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.must_be_node_pool()
    lb.wait_for_healthy(lb.node_ips())
    node = sorted(lb.target.node_addresses())[0]
    tainted_at = mark_node(node, {"key": "ToBeDeletedByClusterAutoscaler", "value": str(int(time.time())),
                                  "effect": "PreferNoSchedule"})
    unhealthy_at = lb.wait_for_healthy(lb.node_ips() - lb.node_ips({node}))
    measure("time_to_unhealthy_node_deleted", unhealthy_at - tainted_at, "s",
            declared=declared.time_to_unhealthy)
    bound = allowed(declared, declared.time_to_unhealthy, "time to unhealthy")
    assert unhealthy_at - tainted_at <= bound.total, f"took {unhealthy_at - tainted_at:.2f}s, allowed {bound}"
