"""Clients inside the cluster: a pod that connects to a Service's load-balancer address.

Which path a pod's traffic takes is what the ingress's ipMode says (KEP-1860), and the provider
declares which one its implementation publishes. With ``VIP`` the address counts as the nodes'
own: kube-proxy on the pod's node delivers the traffic to an endpoint without the load balancer,
and keeps the pod's address even under policy Local (upstream's "should work from pods"). With
``Proxy`` kube-proxy leaves the address alone: the traffic goes out to the load balancer as an
outside client's does. Both tests use policy Local, where the two paths differ in what the backend
sees. loadBalancerSourceRanges admit and deny pods as they do outside clients, whoever enforces
them on the pod's path.
"""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakePodClients, MakeService
from lbconform.config import Timeouts
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.lb import LoadBalancer
from lbconform.providers.base import IP_MODE_PROXY, IP_MODE_VIP, NotSupported
from lbconform.traffic.client import Client
from lbconform.traffic.in_cluster import wait_for_answers, wait_for_no_answer

pytestmark = pytest.mark.features(Feature.IN_CLUSTER_CLIENTS)


def published_as_declared(lb: LoadBalancer, wanted: str) -> None:
    """The ingress publishes the ipMode the provider declares for the Service; a test of the
    other mode's path is not supported."""
    published = lb.ip_mode()  # once the Service has its address
    declared = lb.declared_ip_mode()
    assert published == declared, (f"the ingress of {lb.namespace}/{lb.name} says ipMode {published}, "
                                   f"the provider declares {declared}")
    if declared != wanted:
        raise NotSupported(f"the implementation declares ipMode {declared} for this Service, so a pod's "
                           f"traffic does not take the {wanted} path")


def sources_seen_from_a_pod(path: str, make_backends: MakeBackends, make_service: MakeService,
                            make_pod_clients: MakePodClients,
                            timeouts: Timeouts) -> tuple[str, list[str | None]]:
    """A policy-Local Service whose ingress publishes the ipMode the provider declares, which must be
    ``path`` (else not supported); a pod reaches it, then makes three new connections at once: the
    pod's address, and the sources the backends saw."""
    lb = make_service(tweaks.traffic_policy_local)
    published_as_declared(lb, path)
    backends = make_backends()
    lb.wait_for_answering(backends)
    [pod] = make_pod_clients(1)
    wait_for_answers(pod, lb.vip, lb.port(), timeouts.lb_propagation)
    return pod.address, pod.sources_seen(lb.vip, lb.port())


def test_pod_reaches_a_vip_address_directly_with_its_own_address(
        make_backends: MakeBackends, make_service: MakeService, make_pod_clients: MakePodClients,
        timeouts: Timeouts) -> None:
    """Where the ingress is ipMode VIP, a pod's new connections to the address reach a backend,
    which sees the pod's own address though the policy is Local: kube-proxy on the pod's node
    delivers them to the Service's endpoints without the load balancer."""
    pod, seen = sources_seen_from_a_pod(IP_MODE_VIP, make_backends, make_service, make_pod_clients, timeouts)
    assert seen == [pod] * len(seen), f"backends saw {seen}, the pod is {pod}"


def test_pod_traffic_to_a_proxy_address_crosses_the_load_balancer(
        make_backends: MakeBackends, make_service: MakeService, make_pod_clients: MakePodClients,
        timeouts: Timeouts) -> None:
    """Where the ingress is ipMode Proxy, a pod's new connections to the address go through the load
    balancer and reach a backend: kube-proxy did not deliver them itself, since the backend sees
    an address other than the pod's though the policy is Local (the load balancer's, which took
    the flow over so that the replies come back through it)."""
    pod, seen = sources_seen_from_a_pod(IP_MODE_PROXY, make_backends, make_service, make_pod_clients,
                                        timeouts)
    assert None not in seen and pod not in seen, f"backends saw {seen}, the pod is {pod}"


@pytest.mark.features(Feature.SOURCE_RANGES)
def test_source_ranges_admit_and_deny_pods_as_listed(
        make_backends: MakeBackends, make_service: MakeService, make_pod_clients: MakePodClients,
        client: Client, timeouts: Timeouts) -> None:
    """With one pod and the outside client in loadBalancerSourceRanges, both reach the backend
    and the other pod's new connections get no answer; listing the other pod alone turns the two
    pods around and leaves the outside client out."""
    backends = make_backends(replicas=1)
    listed, other = make_pod_clients(2)
    lb = make_service()
    outside = f"{client.address_toward(lb.vip, lb.port())}/32"
    lb.update(tweaks.source_ranges(f"{listed.address}/32", outside))
    wait_for_answers(listed, lb.vip, lb.port(), timeouts.lb_propagation)
    lb.wait_for_backends(backends.names())
    wait_for_no_answer(other, lb.vip, lb.port(), timeouts.lb_propagation)
    lb.update(tweaks.source_ranges(f"{other.address}/32"))
    wait_for_answers(other, lb.vip, lb.port(), timeouts.lb_propagation)
    wait_for_no_answer(listed, lb.vip, lb.port(), timeouts.lb_propagation)
    lb.wait_for_unreachable(backends.names())
