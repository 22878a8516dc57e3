"""A Service of type LoadBalancer as the suites see it.

It joins the three views a suite needs of one load balancer: the Service (through its
jig), the client that sends traffic to its address, and the provider that reads its
backend pool from the implementation. Every wait is bounded by a named timeout of the
target and returns what it waited for (and, for transitions, when it happened).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.kube import objects
from lbconform.kube.jig import ServiceJig
from lbconform.kube.rawapi import Json
from lbconform.kube.workload import Workload
from lbconform.providers.base import (
    ENTRY_ONE_NODE,
    IP_MODE_VIP,
    NODE_POOL,
    Declared,
    NotSupported,
    PoolMember,
    ServiceRef,
)
from lbconform.target import Target
from lbconform.traffic import checks
from lbconform.wait import LbWaitTimeout, NotYet, poll_until

#: How often pool and endpoint observers look; their measurements are this fine.
OBSERVE_INTERVAL = 0.1


def entry_matches(pool: set[str], eligible: set[str], one_entry_node: bool) -> bool:
    """Whether a pool is what the declared entry makes of the ``eligible`` addresses: all of them,
    or, where one announcing node takes the traffic, exactly one of them."""
    return len(pool) == 1 and pool <= eligible if one_entry_node else pool == eligible


@dataclass
class LoadBalancer:
    jig: ServiceJig
    target: Target
    _vip: str | None = field(default=None, init=False)

    @property
    def name(self) -> str:
        return self.jig.name

    @property
    def namespace(self) -> str:
        return str(self.jig.applier.namespace)

    def service(self) -> Json:
        return self.jig.get()

    @property
    def vip(self) -> str:
        """The ingress address, waited for (timeout ``lb_create``) the first time."""
        if self._vip is None:
            self._vip = self.wait_for_ingress()
        return self._vip

    def wait_for_ingress(self) -> str:
        return self.jig.wait_for_load_balancer(self.target.timeouts.lb_create)

    def ip_mode(self) -> str:
        """The ipMode the ingress publishes for the address (an absent one means VIP)."""
        vip = self.vip  # waited for first: the ingress is read once the address is there
        ingress = self.service().get("status", {}).get("loadBalancer", {}).get("ingress") or []
        mine: Json = next((i for i in ingress if i.get("ip") == vip), {})
        return str(mine.get("ipMode") or IP_MODE_VIP)

    def declared_ip_mode(self) -> str:
        """The ipMode the provider declares for this Service."""
        return self.target.provider.ip_mode(self.ref())

    def keeps_client_address(self) -> bool:
        """Whether the implementation declares that backends see the client's own address."""
        return self.declared().keeps_client_address

    def must_keep_client_address(self) -> None:
        if not self.keeps_client_address():
            reason = self.declared().notes.get("client_address", "the implementation declares it does not")
            raise NotSupported(f"the LB does not keep the client's address: {reason}")

    def port(self, name: str = "http") -> int:
        ports = self.service()["spec"]["ports"]
        return int(next((p["port"] for p in ports if p.get("name") == name), ports[0]["port"]))

    def update(self, change: Callable[[Json], None]) -> Json:
        return self.jig.update(change)

    def health_check_node_port(self) -> int | None:
        port = self.service()["spec"].get("healthCheckNodePort")
        return int(port) if port else None

    # --- traffic ------------------------------------------------------------------------
    def wait_for_backends(self, names: set[str], port: int | None = None) -> None:
        """Every backend in ``names``, and no other, answers through the VIP."""
        checks.wait_for_backends(self.target.client, self.vip, port or self.port(), names,
                                 self.target.timeouts.lb_propagation)

    def wait_for_unreachable(self, names: set[str], port: int | None = None) -> None:
        """New connections through the VIP no longer reach the backends in ``names``."""
        checks.wait_for_unreachable(self.target.client, self.vip, port or self.port(), names,
                                    self.target.timeouts.lb_propagation, self.target.timeouts.request)

    # --- the implementation's view ------------------------------------------------------
    def ref(self) -> ServiceRef:
        svc = self.service()
        return ServiceRef(self.namespace, self.name, svc["metadata"]["uid"], self._vip or "")

    def pool(self) -> list[PoolMember]:
        return self.target.provider.backend_pool(self.ref())

    def pool_kind(self) -> str:
        return self.target.provider.pool_kind(self.ref())

    def healthy(self) -> set[str]:
        """Addresses the implementation sends new connections to (healthy, or unchecked)."""
        return {m.address for m in self.pool() if m.healthy is not False}

    def wait_for_healthy(self, want: set[str], timeout: float | None = None) -> float:
        """Wait until the healthy set is ``want`` (within health_transition unless told); returns
        the monotonic time it was seen."""
        return self._wait_for_healthy_set(lambda healthy: healthy == want, f"to be {sorted(want)}",
                                          timeout or self.target.timeouts.health_transition)

    def wait_for_taken_out(self, addresses: set[str], timeout: float | None = None) -> float:
        """Wait until none of ``addresses`` is in the healthy set (within health_transition unless
        told); returns the monotonic time it was seen."""
        return self._wait_for_healthy_set(lambda healthy: not healthy & addresses,
                                          f"to leave out {sorted(addresses)}",
                                          timeout or self.target.timeouts.health_transition)

    def _wait_for_healthy_set(self, matches: Callable[[set[str]], bool], what: str, timeout: float) -> float:
        seen: dict[str, float] = {}

        def probe() -> bool | NotYet:
            healthy = self.healthy()
            if matches(healthy):
                seen["at"] = time.monotonic()
                return True
            return NotYet(sorted(healthy))

        poll_until(probe, timeout=timeout, interval=OBSERVE_INTERVAL, timeout_error=LbWaitTimeout,
                   description=f"the LB's healthy set of {self.namespace}/{self.name} {what}")
        return seen["at"]

    # --- the implementation's declared model, applied to this Service ----------------------
    def policy(self) -> str:
        return str(self.service()["spec"].get("externalTrafficPolicy") or "Cluster")

    def declared(self) -> Declared:
        """What the provider declares for a Service of this one's traffic policy."""
        return self.target.provider.declared_for(self.policy())

    def one_entry_node(self) -> bool:
        """Whether one announcing node takes all of this Service's traffic (a node pool whose
        implementation declares ENTRY_ONE_NODE), rather than every node that may serve."""
        return self.is_node_pool() and self.declared().entry == ENTRY_ONE_NODE

    def answering_backends(self, backends: Workload) -> set[str]:
        """The backends that new connections through the VIP reach: every one under policy
        Cluster; under Local (where kube-proxy delivers only to the entry node's own backends)
        those on nodes not excluded from load balancers, and where one announcing node takes the
        traffic, those on that node: there the pool must be readable (it names the node)."""
        if self._announced_local():
            self.wait_for_settled_pool(backends)
        return self._answering_now(backends)

    def wait_for_answering(self, backends: Workload) -> None:
        """Every backend that ``answering_backends`` names, and no other, answers through the VIP.
        Where one announcing node takes a Local Service's traffic, a backend outside that set reads
        the announcing node again: an announcement settled on one eligible node may still move to
        another as the implementation catches up with the endpoints (MetalLB's speakers elect among
        the nodes with ready endpoints), and the answers must then agree with the node it names."""
        names = self.answering_backends(backends)
        reread = (lambda: self._answering_now(backends)) if self._announced_local() else None
        checks.wait_for_backends(self.target.client, self.vip, self.port(), names,
                                 self.target.timeouts.lb_propagation, reread=reread)

    def _announced_local(self) -> bool:
        return self.policy() == "Local" and self.one_entry_node()

    def _answering_now(self, backends: Workload) -> set[str]:
        if self.policy() != "Local" or not self.is_node_pool():
            return backends.names()
        nodes = self.healthy_nodes() if self.one_entry_node() else self.eligible_nodes()
        return {p["metadata"]["name"] for node, pods in backends.by_node().items() if node in nodes
                for p in pods}

    def eligible_nodes(self) -> set[str]:
        """Names of the nodes a node pool may hold: all but those labelled to be excluded."""
        return set(self.target.node_addresses()) - self.target.excluded_nodes()

    def healthy_nodes(self) -> set[str]:
        """Names of the nodes in the healthy set (of a node pool)."""
        healthy = self.healthy()
        return {name for name, ip in self.target.node_addresses().items() if ip in healthy}

    def node_ips(self, names: set[str] | None = None) -> set[str]:
        """InternalIPs of the named nodes (all nodes by default)."""
        nodes = self.target.node_addresses()
        return {ip for n, ip in nodes.items() if names is None or n in names}

    def is_node_pool(self) -> bool:
        return self.pool_kind() == NODE_POOL

    def endpoints(self) -> dict[str, dict[str, object]]:
        return objects.endpoints(self.jig.applier.api, self.namespace, self.name)

    def must_be_node_pool(self) -> None:
        """Node health checks apply only where the pool holds nodes."""
        if not self.is_node_pool():
            provider = self.target.provider
            raise NotSupported(f"{provider.name} (mode {provider.mode or 'default'}) sends this Service's "
                               "traffic to pods, not nodes: node health checks do not apply")

    def ready_endpoint_nodes(self) -> set[str]:
        return {str(e["nodeName"]) for e in self.endpoints().values() if e.get("ready")}

    def ready_endpoint_ips(self) -> set[str]:
        return {ip for ip, e in self.endpoints().items() if e.get("ready")}

    def wait_for_endpoint_nodes(self, want: set[str] | int,
                                timeout: float | None = None) -> tuple[float, set[str]]:
        """Wait until the nodes with a ready endpoint are ``want`` (the nodes, or how many);
        returns when that was seen, and the nodes."""
        seen: dict[str, float] = {}

        def matches() -> set[str] | NotYet:
            nodes = self.ready_endpoint_nodes()
            if nodes == want or (isinstance(want, int) and len(nodes) == want):
                seen["at"] = time.monotonic()
                return nodes
            return NotYet(sorted(nodes))

        nodes = poll_until(matches, timeout=timeout or self.target.timeouts.endpoint_lag,
                           interval=OBSERVE_INTERVAL,
                           description=f"ready endpoints of {self.namespace}/{self.name} on {want} nodes")
        return seen["at"], nodes

    def wait_for_pool(self, eligible: set[str]) -> None:
        """Wait until the addresses the LB sends to are what its declared entry makes of the
        ``eligible`` ones (a pool change: endpoint_lag): all of them, or, where one announcing node
        takes the traffic, exactly one of them."""
        one = self.one_entry_node()
        what = f"to be one announcing node of {sorted(eligible)}" if one else f"to be {sorted(eligible)}"
        self._wait_for_healthy_set(lambda healthy: entry_matches(healthy, eligible, one), what,
                                   self.target.timeouts.endpoint_lag)

    def pool_matches(self, eligible: set[str]) -> bool:
        """Whether the pool now is what ``wait_for_pool(eligible)`` waits for."""
        return entry_matches({m.address for m in self.pool()}, eligible, self.one_entry_node())

    def endpoint_serving(self, pod: str) -> bool:
        """Whether the pod's endpoint is still in the Service's slices and serving."""
        for s in objects.endpoint_slices(self.jig.applier.api, self.namespace, self.name):
            for ep in s.get("endpoints") or []:
                if (ep.get("targetRef") or {}).get("name") == pod:
                    return bool(ep.get("conditions", {}).get("serving"))
        return False

    def expected_pool(self, backends: Workload) -> set[str]:
        """What the LB may send to: the ready pods (pod pool), every node (node pool, policy
        Cluster), or the nodes with a ready pod (node pool, policy Local). Where one announcing
        node takes the traffic, its pool is one of these (``wait_for_pool``). Nodes labelled to be
        excluded from load balancers are in none."""
        if not self.is_node_pool():
            return backends.ips()
        eligible = self.eligible_nodes()
        if self.policy() == "Local":
            return self.node_ips(set(backends.by_node()) & eligible)
        return self.node_ips(eligible)

    def wait_for_serving(self, backends: Workload) -> None:
        """Wait until the LB serves: the pool is what it should be (where the provider reads it)
        and every backend its entry reaches answers through the VIP on fresh connections. An
        address in the Service's status is not yet a served one: MetalLB announces it before
        kube-proxy has its rules, and a cloud publishes a hostname before it resolves."""
        self.wait_for_settled_pool(backends)
        self.wait_for_answering(backends)

    def wait_for_settled_pool(self, backends: Workload) -> None:
        """Where the provider can read the pool, wait until it is what it should be (a check that
        must not start while the LB is still adding backends); elsewhere there is nothing to wait for."""
        try:
            self.wait_for_pool(self.expected_pool(backends))
        except NotSupported:
            return
