"""LoadBalancer lifecycle: provisioning, changes, deprovisioning and the cleanup finalizer."""

from __future__ import annotations

import time

import pytest

from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.jig import CLEANUP_FINALIZER
from lbconform.kube.manifests import Tweak
from lbconform.lb import LoadBalancer
from lbconform.providers.base import NotSupported, Provider

pytestmark = pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)


def address_after(lb: LoadBalancer, changed: float) -> str | None:
    """The address as watched until lb_create after the change made at ``changed`` (monotonic): an
    implementation that gives a Service a new address on a change does so while it handles that
    change, and handling a Service takes it at most the time it is declared to take to provision
    one. A new address stays, so one watch after the last of several changes sees any of them."""
    left = lb.target.timeouts.lb_create - (time.monotonic() - changed)
    return lb.jig.ingress_over(max(left, 0.0), expect=lb.vip)


def test_ingress_assigned_and_reachable(make_backends: MakeBackends, make_service: MakeService,
                                        measure: Measure) -> None:
    """A new LoadBalancer Service gets an ingress address within lb_create and reaches every backend."""
    backends = make_backends()
    start = time.monotonic()
    lb = make_service()
    vip = lb.vip
    measure("lb_provisioning", time.monotonic() - start, "s")
    lb.wait_for_backends(backends.names())
    measure("lb_first_traffic", time.monotonic() - start, "s")
    assert vip == lb.jig.ingress()


def test_cleanup_finalizer_while_provisioned(make_backends: MakeBackends, make_service: MakeService,
                                             provider: Provider) -> None:
    """A provisioned load balancer holds the Service with the load-balancer-cleanup finalizer."""
    if not provider.declared().cleanup_finalizer:
        raise NotSupported(f"the {provider.name} provider declares no load-balancer-cleanup finalizer: "
                           + provider.declared().notes.get("finalizer", "its implementation sets none"))
    make_backends(replicas=1)
    lb = make_service()
    lb.wait_for_ingress()
    assert CLEANUP_FINALIZER in lb.jig.finalizers()


def test_port_change(make_backends: MakeBackends, make_service: MakeService) -> None:
    """Changing the Service port moves the listener: the new port serves and the old one stops."""
    backends = make_backends(replicas=1)
    lb = make_service()
    lb.wait_for_backends(backends.names())
    lb.update(tweaks.set_port(8080))
    lb.wait_for_backends(backends.names(), port=8080)
    lb.wait_for_unreachable(backends.names(), port=80)


def test_address_kept_across_changes(make_backends: MakeBackends, make_service: MakeService) -> None:
    """The Service keeps its address across a port change, a traffic-policy change and a
    session-affinity change, and serves through it after each."""
    backends = make_backends(replicas=1)
    lb = make_service()
    vip = lb.vip
    lb.wait_for_backends(backends.names())
    changes = (tweaks.set_port(8080), tweaks.traffic_policy_local, tweaks.session_affinity_client_ip)
    for change in changes:
        changed = time.monotonic()
        lb.update(change)
        lb.wait_for_backends(backends.names())
        now = lb.jig.ingress()
        assert now == vip, f"after {change.__name__}, the address {vip} became {now}"
    now = address_after(lb, changed)
    assert now == vip, (f"within lb_create of the changes ({', '.join(c.__name__ for c in changes)}), "
                        f"the address {vip} became {now}")


def test_type_change_from_cluster_ip_provisions(make_backends: MakeBackends,
                                                make_service: MakeService) -> None:
    """A ClusterIP Service changed to type LoadBalancer gets an address and reaches its backends."""
    backends = make_backends(replicas=1)
    lb = make_service(tweaks.service_type("ClusterIP"))
    lb.update(tweaks.service_type("LoadBalancer"))
    lb.wait_for_backends(backends.names())


def test_type_change_to_cluster_ip_and_back(make_backends: MakeBackends, make_service: MakeService,
                                            provider: Provider, measure: Measure) -> None:
    """A LoadBalancer Service changed to ClusterIP loses its address, finalizer and traffic; changed
    back to LoadBalancer, it gets an address that serves, and the implementation's cleanup
    finalizer again (where it declares one)."""
    backends = make_backends(replicas=1)
    lb = make_service()
    lb.wait_for_backends(backends.names())
    start = time.monotonic()
    lb.update(tweaks.service_type("ClusterIP"))
    lb.jig.wait_for_deprovisioned(lb.target.timeouts.lb_delete)
    measure("lb_deprovisioning", time.monotonic() - start, "s")
    lb.wait_for_unreachable(backends.names())
    lb.update(tweaks.service_type("LoadBalancer"))
    again = LoadBalancer(lb.jig, lb.target)  # the address it had is not promised back
    again.wait_for_backends(backends.names())
    if provider.declared().cleanup_finalizer:
        assert CLEANUP_FINALIZER in lb.jig.finalizers(), lb.jig.finalizers()


def test_delete_deprovisions(make_backends: MakeBackends, make_service: MakeService,
                             measure: Measure) -> None:
    """A deleted LoadBalancer Service is gone within lb_delete and its address no longer reaches
    its backends (the implementation may give the address to the next Service at once)."""
    backends = make_backends(replicas=1)
    lb = make_service()
    lb.wait_for_backends(backends.names())
    port = lb.port()
    start = time.monotonic()
    lb.jig.delete_and_wait(lb.target.timeouts.lb_delete)
    measure("lb_deletion", time.monotonic() - start, "s")
    lb.wait_for_unreachable(backends.names(), port)


def test_without_node_ports(make_backends: MakeBackends, make_service: MakeService,
                            no_node_ports: Tweak) -> None:
    """With allocateLoadBalancerNodePorts false, no node port is allocated and the VIP still serves."""
    backends = make_backends()
    lb = make_service(no_node_ports)
    assert all("nodePort" not in p for p in lb.service()["spec"]["ports"])
    lb.wait_for_backends(backends.names())


def test_node_ports_turned_on_keep_the_address(make_backends: MakeBackends, make_service: MakeService,
                                               no_node_ports: Tweak) -> None:
    """allocateLoadBalancerNodePorts false -> true: node ports are allocated, the Service keeps its
    address and serves through it."""
    backends = make_backends(replicas=1)
    lb = make_service(no_node_ports)
    vip = lb.vip
    lb.wait_for_backends(backends.names())
    changed = time.monotonic()
    lb.update(tweaks.node_ports)
    assert all(p.get("nodePort") for p in lb.service()["spec"]["ports"])
    lb.wait_for_backends(backends.names())
    now = address_after(lb, changed)
    assert now == vip, f"once node ports were allocated, the address {vip} became {now}"
