"""What the data plane should do for one Service: pure functions, no I/O.

``pool`` turns the Service, its EndpointSlices and the nodes into backends; ``plan`` turns
the pool, the health of each backend and the defects into the rules ``nft`` renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lbconform_lab.lb.params import NEVER_FORGET_SECONDS, SHORT_IDLE_SECONDS, Params

Json = dict[str, Any]

#: fwmark of node K in passthrough mode (routing table MARK_BASE + K routes VIPs via node K).
MARK_BASE = 0x100
KUBE_PROXY_HEALTH_PORT = 10256


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ip: str
    index: int
    #: Labelled node.kubernetes.io/exclude-from-external-load-balancers: in no pool.
    excluded: bool = False


@dataclass(frozen=True)
class HealthTarget:
    protocol: str  # "http" or "tcp"
    ip: str
    port: int
    path: str = "/healthz"


@dataclass(frozen=True)
class Backend:
    key: str
    ip: str
    #: (protocol, service port) -> port on this backend (node port, target port, or the service port)
    ports: tuple[tuple[tuple[str, int], int], ...]
    health: HealthTarget | None
    mark: int = 0


@dataclass(frozen=True)
class PortRule:
    protocol: str
    port: int
    #: NAT modes: (ip, port) per healthy backend; node mode: the backends' marks
    targets: tuple[tuple[str, int], ...] = ()
    marks: tuple[int, ...] = ()


@dataclass(frozen=True)
class ServicePlan:
    key: str
    index: int
    vip: str
    mode: str
    rules: tuple[PortRule, ...]
    affinity: bool
    source_ranges: tuple[str, ...]
    idle_timeout: int
    tcp_reset: bool
    snat: bool
    #: NAT modes: flows from inside the cluster (pods, nodes) leave with the LB's address as
    #: source, so the backend's replies come back through the LB to be translated back.
    hairpin: bool = False
    seed: int = 0
    notes: tuple[str, ...] = field(default=())


def _service_ports(svc: Json) -> list[Json]:
    return list(svc["spec"].get("ports") or [])


EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
#: The ranges-drop-all defect's source range: the limited broadcast address, no client's.
ADMITS_NOBODY = "255.255.255.255/32"


def node_infos(nodes: list[Json]) -> list[NodeInfo]:
    """Every lab node (excluded ones too: they stay routed; ``eligible`` leaves them out of pools)."""
    out = []
    for n in nodes:
        ip = next((a["address"] for a in n.get("status", {}).get("addresses", [])
                   if a["type"] == "InternalIP"), None)
        name = n["metadata"]["name"]
        if ip is None or not name.startswith("node-"):
            continue
        excluded = EXCLUDE_LABEL in (n["metadata"].get("labels") or {})
        out.append(NodeInfo(name, ip, int(name.split("-", 1)[1]), excluded))
    return sorted(out, key=lambda i: i.index)


def eligible(nodes: list[NodeInfo], defects: frozenset[str]) -> list[NodeInfo]:
    """The nodes a Service's pool may hold: not those labelled to be excluded (unless the
    ignore-exclusion-label defect is on)."""
    if "forget-a-node" in defects:
        nodes = nodes[:-1]
    if "ignore-exclusion-label" in defects:
        return nodes
    return [n for n in nodes if not n.excluded]


def pool(svc: Json, slices: list[Json], nodes: list[NodeInfo], params: Params,
         defects: frozenset[str]) -> dict[str, Backend]:
    """Every backend the Service may send to, healthy or not."""
    ports = _service_ports(svc)
    local = svc["spec"].get("externalTrafficPolicy") == "Local"
    hc_port = int(svc["spec"].get("healthCheckNodePort") or 0) if local else KUBE_PROXY_HEALTH_PORT
    if params.mode in ("node", "nodeport"):
        out: dict[str, Backend] = {}
        for n in nodes:
            if params.mode == "node":
                mapping = tuple(((p.get("protocol", "TCP"), int(p["port"])), int(p["port"])) for p in ports)
            else:
                mapping = tuple(((p.get("protocol", "TCP"), int(p["port"])), int(p.get("nodePort") or 0))
                                for p in ports if p.get("nodePort"))
            out[n.name] = Backend(n.name, n.ip, mapping, HealthTarget("http", n.ip, hc_port),
                                  MARK_BASE + n.index)
        return out
    # pod mode: the ready endpoints of the Service's slices
    by_name = {n.name: n for n in nodes}
    out = {}
    for s in slices:
        slice_ports = {p.get("name", ""): int(p["port"]) for p in s.get("ports") or [] if p.get("port")}
        for ep in s.get("endpoints") or []:
            if not ep.get("conditions", {}).get("ready"):
                continue
            for addr in ep.get("addresses", []):
                mapping = tuple(((p.get("protocol", "TCP"), int(p["port"])), slice_ports[p.get("name", "")])
                                for p in ports if p.get("name", "") in slice_ports)
                ip = addr
                if "node-ips-in-pod-pool" in defects:
                    node = by_name.get(ep.get("nodeName", ""))
                    ip = node.ip if node else addr
                health = None
                if params.hc_protocol and mapping:
                    first = mapping[0][1]
                    health = HealthTarget(params.hc_protocol, ip, first, params.hc_path)
                out[addr] = Backend(addr, ip, mapping, health)
    return out


def plan(svc: Json, index: int, vip: str, params: Params, backends: list[Backend],
         defects: frozenset[str], previous: ServicePlan | None = None, salt: int = 0) -> ServicePlan:
    """Rules for the healthy ``backends`` (already ordered and filtered by health); ``previous``
    is the Service's last plan (the sticky-* defects keep what it had); ``salt`` is the process's
    own, which the rehash-on-restart defect mixes into the hash seed (a correct LB hashes alike
    in every process, so a flow it forgot finds its backend again)."""
    rules = []
    if "no-spread" in defects:
        backends = backends[:1]
    protocols = {p.get("protocol", "TCP") for p in _service_ports(svc)}
    for p in _service_ports(svc):
        proto, port = p.get("protocol", "TCP"), int(p["port"])
        if proto == "UDP" and "TCP" in protocols and "drop-udp-on-mixed" in defects:
            rules.append(PortRule(proto, port))  # no backend: rendered as a drop
        elif params.mode == "node":
            rules.append(PortRule(proto, port, marks=tuple(b.mark for b in backends)))
        else:
            targets = tuple((b.ip, dict(b.ports)[(proto, port)]) for b in backends
                            if (proto, port) in dict(b.ports))
            rules.append(PortRule(proto, port, targets=targets))
    spec = svc["spec"]
    affinity = spec.get("sessionAffinity") == "ClientIP" and "no-affinity" not in defects
    if "sticky-affinity" in defects and previous is not None:
        affinity = affinity or previous.affinity
    ranges = () if "ignore-source-ranges" in defects else tuple(spec.get("loadBalancerSourceRanges") or ())
    if "sticky-source-ranges" in defects and previous is not None and not ranges:
        ranges = previous.source_ranges
    if ranges and "ranges-drop-all" in defects:
        ranges = (ADMITS_NOBODY,)
    local = spec.get("externalTrafficPolicy") == "Local"
    idle = (SHORT_IDLE_SECONDS if "short-idle" in defects
            else NEVER_FORGET_SECONDS if "never-forget" in defects else params.idle_timeout)
    meta = svc["metadata"]
    return ServicePlan(
        key=f"{meta['namespace']}/{meta['name']}", index=index, vip=vip, mode=params.mode,
        rules=tuple(rules), affinity=affinity, source_ranges=ranges, idle_timeout=idle,
        # reset-on-change: the flows it forgets on a change get a reset, not a new backend
        tcp_reset=(params.tcp_reset != ("wrong-idle-reset" in defects)) or "reset-on-change" in defects,
        snat=local and "snat-local" in defects,
        hairpin=params.mode != "node" and not (params.mode == "nodeport" and "no-hairpin" in defects),
        seed=((index * 2654435761) ^ (salt if "rehash-on-restart" in defects else 0)) & 0xFFFFFFFF,
    )
