"""The provider of MetalLB: the pool is the node(s) announcing the Service's address.

MetalLB assigns addresses and announces them (layer 2: one node answers ARP/NDP for the
address; BGP: the nodes advertise a route); the node's kube-proxy does the rest. So it has
no health checks and no idle timeout of its own, and no pool beyond "who announces". Its
speakers write what they announce as ``ServiceL2Status`` and ``ServiceBGPStatus`` objects
(group ``metallb.io``, version ``v1beta1``, in the speakers' namespace, one per announcing
node, named ``l2-*`` / ``bgp-*``) whose ``status`` holds ``node``, ``serviceName`` and
``serviceNamespace`` (upstream ``api/v1beta1/servicel2status_types.go``,
``servicebgpstatus_types.go``; BGP ones also list ``peers``). The pool here is those nodes'
InternalIPs, with ``healthy`` None: MetalLB probes nothing.

Features it does not claim, and why:

- ``HealthCheckTransitions``: there is no health check to flip. What MetalLB does instead is
  follow the EndpointSlices: with externalTrafficPolicy Local a speaker announces only from a
  node with a ready local endpoint (layer 2 elects among those; BGP advertises only from
  those), so eTP Local works, through kube-proxy's node-local forwarding, and a node losing
  its last endpoint stops announcing. That is endpoint tracking, not health checking, and has
  no interval or threshold to compare with; a user who wants it measured can claim the
  feature with ``--features HealthCheckTransitions``.
- ``IdleTimeout``: flows are the node's conntrack entries (kube-proxy sets the established
  TCP timeout to 24 h); MetalLB adds none.
- ``PodBackendPool``: traffic always lands on a node.

``LoadBalancerRestart`` restarts the controller Deployment (``restart_load_balancer``) and the
speaker DaemonSet (``restart_node_agents``).

Options (``--provider-option NAME=VALUE``): ``namespace``, the speakers' namespace where the
status objects live (env ``METALLB_NAMESPACE``, default ``metallb-system``);
``requestable-addresses``, comma-separated addresses that Services may ask for with
``metallb.io/loadBalancerIPs`` (default: those of the IPAddressPools with ``autoAssign: false``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from lbconform.config import Timeouts
from lbconform.interface import expand_addresses
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import ApiError
from lbconform.kube.workload import Workload
from lbconform.providers.announcer import Announcer
from lbconform.providers.base import Declared, NotSupported, PoolMember, ServiceRef
from lbconform.providers.support import cluster_nodes, require_api

GROUP_VERSION = "metallb.io/v1beta1"
#: Layer 2 failover: "If you encounter a situation where layer 2 mode failover is slow (more than
#: about 10s), please file a bug" (MetalLB concepts, layer 2 mode, limitations). memberlist's LAN
#: defaults (1 s probes, 4 s suspicion on up to 9 nodes) are where most of it goes.
NODE_FAILOVER_SECONDS = 10.0
L2_STATUSES, BGP_STATUSES = "servicel2statuses", "servicebgpstatuses"
#: How a Service asks MetalLB for addresses (it still reads spec.loadBalancerIP too, deprecated).
REQUEST_ANNOTATION = "metallb.io/loadBalancerIPs"


#: The label naming the speaker's node that owns (writes) a status object.
OWNER_LABEL = "metallb.io/node"


def announcing_nodes(statuses: Iterable[Mapping[str, Any]], namespace: str, name: str) -> list[str]:
    """The nodes that ServiceL2Status / ServiceBGPStatus objects name for one Service, sorted.

    A node is the object's owner label, where it has one, before ``status.node``: in v0.15.2
    ``status.node`` is immutable, and a speaker that takes an address over while the last
    announcer's object still exists patches that object's labels to itself and then fails to
    patch its status (metallb#2930, fixed in v0.16.0), so ``status.node`` may go on naming a node
    that announces nothing. The label is what MetalLB's own status writers go by."""
    nodes = set()
    for obj in statuses:
        status = obj.get("status", {})
        if (status.get("serviceNamespace"), status.get("serviceName")) != (namespace, name):
            continue
        node = (obj.get("metadata", {}).get("labels") or {}).get(OWNER_LABEL) or status.get("node")
        if node:
            nodes.add(node)
    return sorted(nodes)


def pool_from_statuses(statuses: Iterable[Mapping[str, Any]], namespace: str, name: str,
                       node_ips: Mapping[str, str]) -> list[PoolMember]:
    """Announcing nodes -> members at their InternalIP (a node without one keeps its name only)."""
    return [PoolMember(address=node_ips.get(node, ""), healthy=None, name=node)
            for node in announcing_nodes(statuses, namespace, name)]


def held_addresses(pools: Iterable[Mapping[str, Any]]) -> list[str]:
    """The addresses of the pools with ``autoAssign: false``, which MetalLB hands out only to a
    Service that asks for one (``spec.addresses``: CIDRs or ``first-last`` ranges), at most
    ``interface.MAX_REQUESTABLE``."""
    entries = [str(entry) for pool in pools if not (pool.get("spec") or {}).get("autoAssign", True)
               for entry in (pool.get("spec") or {}).get("addresses") or []]
    return expand_addresses(entries)


class MetalLBProvider(Announcer):
    name = "metallb"
    options_help: ClassVar[Mapping[str, str]] = {
        "namespace": "the MetalLB speakers' namespace (env METALLB_NAMESPACE, default metallb-system)",
        "requestable-addresses": "comma-separated addresses Services may ask for (default: those of "
                                 "the IPAddressPools with autoAssign: false)"}

    def declared(self) -> Declared:
        return self.announcing(
            NODE_FAILOVER_SECONDS, cleanup_finalizer=False, agent_restart_moves_address=True,
            notes={"source": "MetalLB concepts (metallb.io/concepts): address allocation and L2/BGP "
                             "announcement only; no health checks, no connection tracking of its own",
                   "failover": "layer 2: memberlist detects a dead speaker and another node announces",
                   "entry": "layer 2: one node per address answers ARP/NDP (concepts/layer2.md); BGP "
                            "advertises from every eligible node, a mode this provider does not yet model",
                   "finalizer": "MetalLB's controller frees addresses itself and sets no "
                                "service.kubernetes.io/load-balancer-cleanup finalizer",
                   "agent restart": "layer 2: a speaker stopped for an upgrade leaves memberlist, another "
                                    "node announces its addresses, and it takes them back when it joins "
                                    "again (metallb#795, a maintainer: the current expected behavior)"})

    def requestable_addresses(self) -> list[str]:
        given = [a.strip() for a in self.option("requestable-addresses").split(",") if a.strip()]
        if given:
            return given
        api = require_api(self.api, self.name, "IPAddressPool objects")
        namespace = self.option("namespace", "METALLB_NAMESPACE", default="metallb-system")
        try:
            pools = api.get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/ipaddresspools").get("items", [])
        except ApiError as exc:
            if exc.status != 404:
                raise
            pools = []
        held = held_addresses(pools)
        if held:
            return held
        raise NotSupported(f"no MetalLB IPAddressPool in {namespace} has autoAssign: false (addresses held "
                           "for Services that ask): make one, or give its addresses as --provider-option "
                           "requestable-addresses=A,B,...")

    def address_request(self, address: str) -> dict[str, str]:
        return {REQUEST_ANNOTATION: address}

    def restart_load_balancer(self) -> None:
        """A rollout restart of MetalLB's controller, the Deployment that assigns the addresses, as
        its upgrade does."""
        self._workload("Deployment", "controller").roll(self.timeouts().rollout)

    def node_agents(self) -> str:
        return "the speaker DaemonSet (it announces each address from one node)"

    def restart_node_agents(self) -> None:
        """A rollout restart of the speaker DaemonSet, one node at a time, as its upgrade does: the
        announcing node's speaker leaves memberlist on SIGTERM, another node announces, and the
        new speaker takes the address back once it has joined."""
        self._workload("DaemonSet", "speaker").roll(self.timeouts().rollout)

    def _workload(self, kind: str, component: str) -> Workload:
        api = require_api(self.api, self.name, f"the {component} {kind}")
        namespace = self.option("namespace", "METALLB_NAMESPACE", default="metallb-system")
        return Workload(Applier(api, namespace), kind, component,
                        selector=f"app=metallb,component={component}")

    def timeouts(self) -> Timeouts:
        # Assignment and announcement take seconds; L2 failover waits for memberlist (~10 s).
        return Timeouts(lb_create=60, lb_propagation=60, lb_delete=60, endpoint_lag=30,
                        health_transition=30, rollout=180, namespace_delete=180, request=5)

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        api = require_api(self.api, self.name, "ServiceL2Status and ServiceBGPStatus objects")
        namespace = self.option("namespace", "METALLB_NAMESPACE", default="metallb-system")
        statuses: list[dict[str, Any]] = []
        missing = []
        for plural in (L2_STATUSES, BGP_STATUSES):
            try:
                statuses += api.get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/{plural}").get("items", [])
            except ApiError as exc:
                if exc.status != 404:
                    raise
                missing.append(plural)
        if len(missing) == 2:
            raise NotSupported("this MetalLB publishes no ServiceL2Status/ServiceBGPStatus objects "
                               "(older releases do not), so its announcing nodes cannot be read")
        return pool_from_statuses(statuses, service.namespace, service.name,
                                  cluster_nodes(api).ip_by_name)
