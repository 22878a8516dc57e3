"""What the data plane should do for one Service: pure functions, no I/O.

``pool`` turns the Service, its EndpointSlices and the nodes into backends; ``plan`` turns
the pool, the health of each backend and the defects into the rules ``nft`` renders. The values
themselves are ``model``'s, named here too.
"""

from __future__ import annotations

from lbconform_lab.lb.defects import ADMITS_NOBODY, At, apply
from lbconform_lab.lb.model import Backend, HealthTarget, Json, NodeInfo, PortRule, ServicePlan
from lbconform_lab.lb.params import Params

__all__ = [
    "ADMITS_NOBODY", "EXCLUDE_LABEL", "KUBE_PROXY_HEALTH_PORT", "MARK_BASE", "Backend", "HealthTarget",
    "Json", "NodeInfo", "PortRule", "ServicePlan", "eligible", "node_infos", "plan", "pool",
]

#: fwmark of node K in passthrough mode (routing table MARK_BASE + K routes VIPs via node K).
MARK_BASE = 0x100
KUBE_PROXY_HEALTH_PORT = 10256


def _service_ports(svc: Json) -> list[Json]:
    return list(svc["spec"].get("ports") or [])


EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


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
    """The nodes a Service's pool may hold: not those labelled to be excluded."""
    nodes = apply(At.NODES, nodes, defects)
    if not apply(At.EXCLUSION, True, defects):
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
                node = by_name.get(ep.get("nodeName", ""))
                ip = apply(At.POD_ADDRESS, addr, defects, node.ip if node else None)
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
    backends = apply(At.SPREAD, backends, defects)
    protocols = {p.get("protocol", "TCP") for p in _service_ports(svc)}
    for p in _service_ports(svc):
        proto, port = p.get("protocol", "TCP"), int(p["port"])
        if params.mode == "node":
            rule = PortRule(proto, port, marks=tuple(b.mark for b in backends))
        else:
            targets = tuple((b.ip, dict(b.ports)[(proto, port)]) for b in backends
                            if (proto, port) in dict(b.ports))
            rule = PortRule(proto, port, targets=targets)
        rules.append(apply(At.PORT_RULE, rule, defects, "TCP" in protocols))
    spec = svc["spec"]
    affinity = apply(At.AFFINITY, spec.get("sessionAffinity") == "ClientIP", defects, previous)
    ranges = apply(At.SOURCE_RANGES, tuple(spec.get("loadBalancerSourceRanges") or ()), defects, previous)
    local = spec.get("externalTrafficPolicy") == "Local"
    meta = svc["metadata"]
    return ServicePlan(
        key=f"{meta['namespace']}/{meta['name']}", index=index, vip=vip, mode=params.mode,
        rules=tuple(rules), affinity=affinity, source_ranges=ranges,
        idle_timeout=apply(At.IDLE, params.idle_timeout, defects),
        tcp_reset=apply(At.IDLE_RESET, params.tcp_reset, defects) or apply(At.CHANGE_RESET, False, defects),
        snat=apply(At.SNAT, False, defects, local),
        hairpin=apply(At.HAIRPIN, params.mode != "node", defects, params.mode),
        seed=((index * 2654435761) ^ apply(At.HASH_SALT, 0, defects, salt)) & 0xFFFFFFFF,
    )
