"""UDP: a flow with a fixed source port keeps working when its server pod is replaced, on another
node and on the same node."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.target import Target
from lbconform.traffic.client import Client
from lbconform.traffic.udp import UdpFlow

pytestmark = pytest.mark.features(Feature.UDP)

#: The client's fixed source port for the flow under test.
SOURCE_PORT = 40053


@pytest.mark.parametrize("where", ["same-node", "another-node"])
def test_udp_flow_follows_a_replaced_server(make_backends: MakeBackends, make_service: MakeService,
                                           client: Client, target: Target, where: str) -> None:
    """A UDP flow with a fixed source port reaches the new server pod once the old one is replaced."""
    first, second = sorted(target.node_addresses())[:2]
    backends = make_backends(tweaks.node_selector(first), replicas=1)
    lb = make_service(tweaks.udp_port())
    flow = UdpFlow(client, lb.vip, lb.port("udp"), SOURCE_PORT, lb.target.timeouts.request)
    old = flow.wait_for_server(backends.names(), lb.target.timeouts.lb_propagation)
    if where == "same-node":
        backends.delete_pod(old)
    else:
        backends.update(tweaks.node_selector(second))
    backends.wait_replaced({old}, lb.target.timeouts.rollout)
    flow.wait_for_server(backends.names(), lb.target.timeouts.endpoint_lag)
