"""externalTrafficPolicy: Local: the client's address is kept, and only nodes with a ready local
endpoint take traffic, as their kube-proxy health check says."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer
from lbconform.target import Target
from lbconform.traffic import checks
from lbconform.traffic.client import Client

pytestmark = pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL)

#: New connections that must all reach a backend when only some nodes have one.
CONNECTIONS = 30


def test_client_source_ip_preserved(make_backends: MakeBackends, make_service: MakeService,
                                    client: Client) -> None:
    """Backends see the client's own address as the source of its connections."""
    backends = make_backends()
    lb = make_service(tweaks.traffic_policy_local)
    lb.wait_for_answering(backends)
    lb.must_keep_client_address()
    for _ in range(checks.SUCCESSES):
        seen, sent_from = client.source_seen(lb.vip, lb.port())
        assert seen == sent_from, f"backend saw {seen}, the client sent from {sent_from}"


def test_only_nodes_with_local_endpoint_get_traffic(make_backends: MakeBackends, make_service: MakeService,
                                                    client: Client, target: Target) -> None:
    """With backends on some nodes only, every new connection reaches a backend (none is sent to a
    node without one, where kube-proxy would drop it)."""
    backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()) - 1)
    lb = make_service(tweaks.traffic_policy_local)
    lb.wait_for_answering(backends)
    answers = [checks.answer_or_failure(client, lb.vip, lb.port()) for _ in range(CONNECTIONS)]
    assert set(answers) <= backends.names(), answers


def test_health_check_node_port_reports_local_endpoints(make_backends: MakeBackends,
                                                        make_service: MakeService, client: Client,
                                                        target: Target) -> None:
    """Each node's healthCheckNodePort answers 200 with a local endpoint and 503 without, with
    kube-proxy's JSON body naming the Service and its local endpoint count."""
    backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()) - 1)
    lb = make_service(tweaks.traffic_policy_local)
    port = lb.health_check_node_port()
    with_backend = set(backends.by_node())
    for node, ip in target.node_addresses().items():
        local = 1 if node in with_backend else 0
        checks.wait_for_health_check(client, ip, port, lb.namespace, lb.name, local,
                                     target.timeouts.endpoint_lag)


def wait_for_local_policy_applied(lb: LoadBalancer, backends: Workload, client: Client,
                                  target: Target) -> None:
    """Every node's kube-proxy serves the Service as Local: its health check answers with the
    node's local endpoints (kube-proxy updates it in the sync that writes the node's rules), so a
    node without one now drops what it is sent, whatever the load balancer still sends there."""
    port = lb.health_check_node_port()
    assert port is not None
    with_backend = set(backends.by_node())
    for node, ip in target.node_addresses().items():
        checks.wait_for_health_check(client, ip, port, lb.namespace, lb.name, int(node in with_backend),
                                     target.timeouts.endpoint_lag)


def test_switching_policy_back_and_forth(make_backends: MakeBackends, make_service: MakeService,
                                         client: Client, target: Target) -> None:
    """Cluster -> Local -> Cluster -> Local, with backends on some nodes only: the health check port
    comes and goes; after each switch every backend answers (under Local, every one the LB's entry
    reaches); after each switch to Local, within lb_propagation, every new connection reaches a
    backend (the load balancer checks the nodes where the new policy says and stops sending to
    the node without one) and the client's address is kept (where the implementation declares
    it keeps it)."""
    backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()) - 1)
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.wait_for_backends(backends.names())
    for policy in ("Local", "Cluster", "Local"):
        lb.update(tweaks.traffic_policy(policy))
        assert (lb.health_check_node_port() is not None) == (policy == "Local")
        lb.wait_for_answering(backends)
        if policy == "Local":
            wait_for_local_policy_applied(lb, backends, client, target)
            checks.wait_for_every_connection_answered(client, lb.vip, lb.port(), backends.names(),
                                                      lb.target.timeouts.lb_propagation)
            if lb.keeps_client_address():
                checks.wait_for_source_kept(client, lb.vip, lb.port(), lb.target.timeouts.lb_propagation)
