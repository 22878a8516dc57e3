"""The provider for any load balancer: client-side checks only.

It claims every feature that can be observed from the client and from the cluster's own
objects; reading the pool needs an implementation's API, so ``BackendPool`` and
``PodBackendPool`` are not supported, and its declared parameters are the common cloud ones
unless the user states others (a declaration file, ``--declaration``, states them as data, and how
to read the pool too). On a local cluster (the lab) its node chaos is that cluster's.
"""

from __future__ import annotations

from lbconform.features import Feature
from lbconform.providers.base import Declared
from lbconform.providers.nodepower import LocalNodePower


class GenericProvider(LocalNodePower):
    name = "generic"

    def features(self) -> set[Feature]:
        # LoadBalancerRestart: an unknown implementation's controller cannot be restarted.
        return set(Feature) - {Feature.BACKEND_POOL, Feature.POD_BACKEND_POOL, Feature.LOAD_BALANCER_RESTART}

    def declared(self) -> Declared:
        return Declared(health_check_interval=5.0, healthy_threshold=2, unhealthy_threshold=2,
                        idle_timeout=None, notes={"source": "generic defaults; not the implementation's"})
