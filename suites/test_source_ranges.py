"""loadBalancerSourceRanges: listed clients are admitted, others get no answer."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.traffic.client import Client

#: A range that holds no client of the lab nor of a test runner (TEST-NET-1, RFC 5737).
FOREIGN_RANGE = "192.0.2.0/24"


@pytest.mark.features(Feature.SOURCE_RANGES)
def test_source_range_admits_listed_client(make_backends: MakeBackends, make_service: MakeService,
                                           client: Client) -> None:
    """A client inside loadBalancerSourceRanges (among other ranges) reaches every backend."""
    backends = make_backends()
    lb = make_service()
    lb.update(tweaks.source_ranges(FOREIGN_RANGE, f"{client.address_toward(lb.vip, lb.port())}/32"))
    lb.wait_for_backends(backends.names())


@pytest.mark.features(Feature.SOURCE_RANGES)
def test_source_range_denies_unlisted_client(make_backends: MakeBackends, make_service: MakeService,
                                             client: Client) -> None:
    """A client that was admitted gets no answer once loadBalancerSourceRanges no longer lists it,
    and is admitted again when it is listed again."""
    backends = make_backends(replicas=1)
    lb = make_service()
    admitted = tweaks.source_ranges(FOREIGN_RANGE, f"{client.address_toward(lb.vip, lb.port())}/32")
    lb.update(admitted)
    lb.wait_for_backends(backends.names())
    lb.update(tweaks.source_ranges(FOREIGN_RANGE))
    lb.wait_for_unreachable(backends.names())
    lb.update(admitted)
    lb.wait_for_backends(backends.names())


@pytest.mark.features(Feature.SOURCE_RANGES)
def test_cleared_source_ranges_admit_everyone(make_backends: MakeBackends, make_service: MakeService) -> None:
    """A client kept out by loadBalancerSourceRanges reaches the backends once the ranges are cleared."""
    backends = make_backends(replicas=1)
    lb = make_service(tweaks.source_ranges(FOREIGN_RANGE))
    lb.wait_for_unreachable(backends.names())
    lb.update(tweaks.no_source_ranges)
    lb.wait_for_backends(backends.names())
