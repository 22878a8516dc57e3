"""A Service changed field by field (upstream's "change the type and ports of a TCP/UDP service"):
its node port survives the way to LoadBalancer, its address survives new node and service ports,
it answers nothing without endpoints, and it lets its address go when it is a ClusterIP again."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.rawapi import ApiError, Json
from lbconform.lb import LoadBalancer
from lbconform.traffic.client import Client
from lbconform.traffic.udp import UdpFlow

pytestmark = pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)

#: The Service port after the port change.
NEW_PORT = 8080
#: Node ports tried, one after another, for the node port change (another Service may hold one).
NODE_PORT_TRIES = 10
NODE_PORT_RANGE = range(30000, 32768)


def udp_only(obj: Json) -> None:
    """The Service's one port is UDP, to netexec's UDP echo."""
    if obj["kind"] == "Service":
        obj["spec"]["ports"] = [{"name": "udp", "port": 80, "targetPort": "udp", "protocol": "UDP"}]


def node_port(lb: LoadBalancer) -> int:
    return int(lb.service()["spec"]["ports"][0]["nodePort"])


def change_node_port(lb: LoadBalancer) -> int:
    """Give the Service's port another node port: the next free one after its own."""
    old = node_port(lb)
    for step in range(1, NODE_PORT_TRIES + 1):
        candidate = NODE_PORT_RANGE[(old - NODE_PORT_RANGE.start + step) % len(NODE_PORT_RANGE)]

        def change(svc: Json, port: int = candidate) -> None:
            svc["spec"]["ports"][0]["nodePort"] = port

        try:
            lb.update(change)
            return candidate
        except ApiError as exc:
            if exc.status != 422:  # 422: that node port is allocated to another Service
                raise
    raise AssertionError(f"no free node port among the {NODE_PORT_TRIES} after {old}")


@pytest.mark.parametrize("protocol", ["TCP", "UDP"])
def test_type_and_port_walk(make_backends: MakeBackends, make_service: MakeService, client: Client,
                            protocol: str) -> None:
    """ClusterIP -> NodePort -> LoadBalancer keeps the node port; a new node port and then a new
    port keep the address, which serves on the new port and no longer on the old; with no
    endpoints it answers nothing; back to ClusterIP it is released and answers nothing."""
    backends = make_backends(replicas=1)
    udp = protocol == "UDP"
    lb = make_service(tweaks.service_type("ClusterIP"), *([udp_only] if udp else []))
    names = backends.names()
    timeout = lb.target.timeouts.lb_propagation

    def serves(port: int) -> None:
        if udp:
            UdpFlow(client, lb.vip, port, 0, lb.target.timeouts.request).wait_for_server(names, timeout)
        else:
            lb.wait_for_backends(names, port=port)

    def silent(port: int) -> None:
        if udp:
            UdpFlow(client, lb.vip, port, 0, lb.target.timeouts.request).wait_for_silence(timeout)
        else:
            lb.wait_for_unreachable(names, port=port)

    def address_kept(after: str) -> None:
        assert lb.jig.ingress() == vip, f"after {after}, the address {vip} became {lb.jig.ingress()}"

    lb.update(tweaks.service_type("NodePort"))
    first_node_port = node_port(lb)
    lb.update(tweaks.service_type("LoadBalancer"))
    assert node_port(lb) == first_node_port
    vip = lb.vip
    serves(80)
    change_node_port(lb)
    serves(80)
    address_kept("a new node port")
    lb.update(tweaks.set_port(NEW_PORT))
    serves(NEW_PORT)
    address_kept("a new port")
    silent(80)
    backends.scale(0)
    silent(NEW_PORT)
    backends.scale(1)
    backends.wait_rolled_out(lb.target.timeouts.rollout)
    names = backends.names()
    serves(NEW_PORT)
    lb.update(tweaks.service_type("ClusterIP"))
    lb.jig.wait_for_deprovisioned(lb.target.timeouts.lb_delete)
    silent(NEW_PORT)
