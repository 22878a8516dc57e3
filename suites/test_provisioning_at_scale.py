"""Provisioning at scale: many LoadBalancer Services created at once are provisioned together, each
as fast as one alone, and each serves. No upstream test does this; users of cloud controllers ask
for it, since a controller that provisions one Service at a time is fine for one and not for fifty."""

from __future__ import annotations

import time

import pytest

from fixtures.harness import MakeBackends, MakeService, Measure, OneBatch
from lbconform.features import Feature
from lbconform.kube.manifests import Applier
from lbconform.provisioning import AddressWatch
from lbconform.target import Target

pytestmark = pytest.mark.features(Feature.PROVISIONING_AT_SCALE)

#: How many Services are created at once.
SERVICES_AT_ONCE = 50


def test_services_created_at_once_each_get_an_address_and_serve(
        make_backends: MakeBackends, make_service: MakeService, namespace: Applier, target: Target,
        measure: Measure, one_batch: OneBatch) -> None:
    """Fifty LoadBalancer Services created one after the other, as fast as the apiserver takes them,
    each get an address of their own within lb_create of their creation (the time one Service alone
    is given), and each then reaches the backends. The addresses are watched from before the first
    creation, so that one given while later Services are still being created is timed when given.
    The datasheet gets the provisioning times' p50, p95 and max, and the time from the first
    creation until the last Service served. Runs against one cluster at once make their fifty one
    run at a time: two runs' would be a hundred at once for the implementation."""
    backends = make_backends(replicas=1)
    lb_create = target.timeouts.lb_create
    services = f"/api/v1/namespaces/{namespace.namespace}/services"
    names = [f"many-{i:02d}" for i in range(SERVICES_AT_ONCE)]
    lbs = []
    with one_batch("provisioning-at-scale"), \
            AddressWatch(lambda: namespace.api.get(services)["items"], names) as watch:
        start = time.monotonic()
        for name in names:
            lbs.append(make_service(name=name))
            watch.created(name)
        got = watch.result(within=lb_create)
    for stat, value in got.summary().items():
        measure(f"many_services_provisioning_{stat}", value, "s", declared=lb_create)
    missing = got.missing()
    assert not missing, (f"{len(missing)} of {SERVICES_AT_ONCE} Services got no address within "
                         f"lb_create={lb_create:g}s of their creation: {', '.join(missing)}")
    late = got.late(lb_create)
    assert not late, f"addresses later than lb_create={lb_create:g}s after creation (s): {late}"
    assert not got.shared(), f"one address given to several Services: {got.shared()}"
    for lb in lbs:
        lb.wait_for_backends(backends.names())
    measure("many_services_last_served", time.monotonic() - start, "s")
