"""A Service that asks for its address (``spec.loadBalancerIP``, or the annotation the
implementation reads) gets exactly that address, and one that asks for an address the
implementation cannot give gets none, and an event that says why."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.providers.base import Provider
from lbconform.wait import LbWaitTimeout, poll_until

pytestmark = pytest.mark.features(Feature.REQUESTED_ADDRESS)

#: An address no implementation can own: TEST-NET-1 (RFC 5737), for documentation only. The
#: tests never send traffic to it.
UNAVAILABLE_ADDRESS = "192.0.2.1"


def asking_for(provider: Provider, address: str) -> Tweak:
    annotations = provider.address_request(address)
    return tweaks.service_annotations(annotations) if annotations else tweaks.load_balancer_ip(address)


def test_requested_address_is_assigned(requested_address: str, make_backends: MakeBackends,
                                       make_service: MakeService, provider: Provider) -> None:
    """A Service that asks for an address held for requests gets exactly it and serves on it."""
    backends = make_backends(replicas=1)
    lb = make_service(asking_for(provider, requested_address))
    assert lb.vip == requested_address
    lb.wait_for_backends(backends.names())


def test_unavailable_address_is_refused_with_an_event(make_backends: MakeBackends, make_service: MakeService,
                                                      provider: Provider) -> None:
    """A Service that asks for an address the implementation cannot own gets a Warning event
    saying so, and no address."""
    make_backends(replicas=1)
    lb = make_service(asking_for(provider, UNAVAILABLE_ADDRESS))
    poll_until(lb.jig.warnings, timeout=lb.target.timeouts.lb_create, timeout_error=LbWaitTimeout,
               description=f"a Warning event on the Service that asked for {UNAVAILABLE_ADDRESS}")
    address = lb.jig.ingress()
    assert address is None, f"the Service asked for {UNAVAILABLE_ADDRESS} and got {address}"
