"""Mixed protocols (KEP-1435): one Service port number served over TCP and UDP at once, each
protocol reaching the backends through the same address, and a protocol removed from the
Service no longer answering new flows.

A UDP flow that was going before the removal may go on: kube-proxy forgets a UDP flow only when
its endpoint stops serving (``pkg/proxy/conntrack/cleanup.go`` in v1.36), not when its Service
port goes, and each datagram keeps the flow's conntrack entry alive. That is the nodes' doing,
not the load balancer's, so only new flows are checked."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.traffic.client import Client
from lbconform.traffic.udp import UdpFlow

pytestmark = pytest.mark.features(Feature.MIXED_PROTOCOL)

#: The client's fixed source port for the UDP flow.
SOURCE_PORT = 40054


def test_tcp_and_udp_on_one_port(make_backends: MakeBackends, make_service: MakeService,
                                 client: Client) -> None:
    """TCP and UDP on the same Service port both reach the backend through the address; once the
    UDP port is removed, new UDP flows get no answer while TCP still does."""
    backends = make_backends(replicas=1)
    lb = make_service(tweaks.udp_beside_tcp)
    port = lb.port()
    assert lb.port("udp") == port
    lb.wait_for_backends(backends.names())
    flow = UdpFlow(client, lb.vip, port, SOURCE_PORT, lb.target.timeouts.request)
    flow.wait_for_server(backends.names(), lb.target.timeouts.lb_propagation)
    lb.update(tweaks.without_port("udp"))
    new_flows = UdpFlow(client, lb.vip, port, 0, lb.target.timeouts.request)  # a new source port each
    new_flows.wait_for_silence(lb.target.timeouts.lb_propagation)
    lb.wait_for_backends(backends.names())
