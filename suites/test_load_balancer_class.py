"""loadBalancerClass (KEP-1959): an implementation serves the Services of its own class, and leaves
a Service of any other class to the implementation that owns it."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.providers.base import Provider

pytestmark = pytest.mark.features(Feature.LOAD_BALANCER_CLASS)

#: A class no implementation owns.
FOREIGN_CLASS = "example.com/no-implementation"
#: How long the foreign Service is watched once a Service of the implementation's own class,
#: created after it, serves: by then the implementation has seen both.
UNCLAIMED_SECONDS = 3.0


def test_service_of_a_foreign_class_gets_no_address(make_backends: MakeBackends, make_service: MakeService,
                                                     provider: Provider) -> None:
    """A Service of a class the implementation does not own gets no address, while a Service of
    its own class (or without one, where it declares none) created after it is served."""
    backends = make_backends(replicas=1)
    own_class = provider.declared().load_balancer_class
    foreign = make_service(tweaks.load_balancer_class(FOREIGN_CLASS), name="foreign")
    own = make_service(*([tweaks.load_balancer_class(own_class)] if own_class else []))
    own.wait_for_backends(backends.names())
    address = foreign.jig.ingress_over(UNCLAIMED_SECONDS, expect=None)
    assert address is None, f"the Service of class {FOREIGN_CLASS} got the address {address}"
