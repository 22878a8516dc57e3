"""externalTrafficPolicy: Cluster: every endpoint is reachable through the VIP, and traffic spreads."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService, Measure
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.traffic.checks import spread
from lbconform.traffic.client import Client

pytestmark = pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER)

#: New connections whose spread over three backends is judged.
SPREAD_CONNECTIONS = 60
#: Each of three backends must get at least this many of them: a fair share is 20, and a
#: uniform spread falls below 5 with a probability near 1e-5.
MIN_SHARE = 5


def test_every_endpoint_reachable(make_backends: MakeBackends, make_service: MakeService) -> None:
    """Every ready endpoint of the Service answers through the VIP."""
    backends = make_backends()
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.wait_for_backends(backends.names())


def test_traffic_spreads_over_endpoints(make_backends: MakeBackends, make_service: MakeService,
                                        client: Client, measure: Measure) -> None:
    """New connections spread over all endpoints: none gets less than a quarter of its fair share."""
    backends = make_backends()
    lb = make_service(tweaks.traffic_policy_cluster)
    lb.wait_for_backends(backends.names())
    counts = spread(client, lb.vip, lb.port(), SPREAD_CONNECTIONS)
    measure("spread_min_share", min(counts[b] for b in backends.names()) / SPREAD_CONNECTIONS, "ratio")
    assert set(counts) == backends.names(), counts
    assert min(counts.values()) >= MIN_SHARE, counts
