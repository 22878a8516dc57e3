"""The provider of the lab's reference load balancer: reads pools from its state API."""

from __future__ import annotations

from lbconform.config import Timeouts
from lbconform.features import Feature
from lbconform.lab.lb.client import LabLB
from lbconform.lab.lb.params import MODES, PREFIX, Params
from lbconform.providers.base import NODE_POOL, POD_POOL, Declared, PoolMember, Provider, ServiceRef


class LabProvider(Provider):
    """``--mode`` picks the reference LB's backend mode for every test Service (by annotation);
    without it the lab's default mode (``lab up --lb-mode``) applies and is what gets reported."""

    name = "lab"
    modes = MODES

    def __init__(self, client: LabLB | None = None) -> None:
        self.client = client or LabLB()
        self.mode = ""

    def service_annotations(self) -> dict[str, str]:
        return {f"{PREFIX}mode": self.mode} if self.mode else {}

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        return {f"{PREFIX}idle-timeout-seconds": str(seconds)}

    def needs_node_ports(self) -> bool:
        return self.mode == "nodeport"

    def pod_pool_annotations(self) -> dict[str, str]:
        return {f"{PREFIX}mode": "pod"}

    def pool_kind(self, service: ServiceRef) -> str:
        state = self.client.service(service.namespace, service.name)
        mode = state["mode"] if state else (self.mode or "node")
        return POD_POOL if mode == "pod" else NODE_POOL

    def features(self) -> set[Feature]:
        return set(Feature)

    def declared(self) -> Declared:
        d = Params()
        return Declared(health_check_interval=d.hc_interval, healthy_threshold=d.hc_healthy,
                        unhealthy_threshold=d.hc_unhealthy, idle_timeout=float(d.idle_timeout),
                        notes={"source": "lab.lbconform.io annotation defaults"})

    def timeouts(self) -> Timeouts:
        # The lab LB answers in seconds; these leave room on a loaded 2-core machine.
        return Timeouts(lb_create=10, lb_propagation=30, lb_delete=30, endpoint_lag=15,
                        health_transition=10, rollout=90, namespace_delete=120, request=3)

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        state = self.client.service(service.namespace, service.name)
        if state is None:
            return []
        healthy = set(state["healthy"])
        return [PoolMember(address=b["address"], healthy=b["name"] in healthy, name=b["name"])
                for b in state["pool"]]
