"""Rendering service plans as one nftables table, and applying it atomically.

Layout of table ``ip lbconform``:

- ``ct timeout`` objects, one per idle timeout and protocol, never deleted while the lab
  runs (conntrack entries hold references to them);
- chain ``pick`` (prerouting, priority mangle): per Service, drop sources outside
  loadBalancerSourceRanges, set the idle timeout on new flows, reset mid-stream pick-ups
  when ``tcp-reset`` is on, and in node mode choose the node by ``ct mark``;
- chain ``to_backend`` (prerouting, priority dstnat): NAT modes choose the backend;
- chain ``masq`` (postrouting, priority srcnat): in the NAT modes, flows from inside the
  cluster (the pod and node ranges) take the LB's address, so that the replies of a backend,
  which would otherwise answer a pod directly, come back through the LB (hairpin); and the
  ``snat-local`` defect.

A flow's backend is ``jhash`` of its 5-tuple (of its source address alone with ClientIP
affinity) modulo the number of healthy backends; conntrack pins it until it is idle for
the Service's idle timeout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from lbconform.errors import LabError
from lbconform_lab import topology as topo
from lbconform_lab.lb.plan import ServicePlan

TABLE = "lbconform"
#: Sources inside the cluster: pods and nodes.
IN_CLUSTER = (topo.POD_CIDR, topo.FABRIC_CIDR)
CHAINS = ("pick", "to_backend", "masq")


def timeout_name(seconds: int, protocol: str) -> str:
    return f"idle_{seconds}_{protocol.lower()}"


def _timeout_object(seconds: int, protocol: str) -> str:
    states = "established: {s}" if protocol == "TCP" else "unreplied: {s}, replied: {s}"
    return (f"  ct timeout {timeout_name(seconds, protocol)} {{\n"
            f"    protocol {protocol.lower()}; l3proto ip\n"
            f"    policy = {{ {states.format(s=seconds)} }}\n  }}\n")


def _hash(plan: ServicePlan, proto: str, count: int) -> str:
    key = "ip saddr" if plan.affinity else f"ip saddr . {proto.lower()} sport"
    return f"jhash {key} mod {count} seed {plan.seed:#x}"


def _map(items: Iterable[str]) -> str:
    return "{ " + ", ".join(f"{i} : {v}" for i, v in enumerate(items)) + " }"


def render(plans: list[ServicePlan], timeouts: set[tuple[int, str]]) -> str:
    """The full table; ``timeouts`` accumulates every timeout object ever needed."""
    for p in plans:
        for r in p.rules:
            timeouts.add((p.idle_timeout, r.protocol))
    out = [f"table ip {TABLE} {{\n"]
    out += [_timeout_object(s, proto) for s, proto in sorted(timeouts)]
    mangle, dnat, snat = [], [], []
    for p in plans:
        match = f"ip daddr {p.vip}"
        if p.source_ranges:
            mangle.append(f"{match} ip saddr != {{ {', '.join(p.source_ranges)} }} drop")
        for r in p.rules:
            l4 = f"{match} {r.protocol.lower()} dport {r.port}"
            mangle.append(f"{l4} ct state new ct timeout set \"{timeout_name(p.idle_timeout, r.protocol)}\"")
            if p.tcp_reset and r.protocol == "TCP":
                # A non-SYN packet of a flow conntrack forgot: the flow idled out.
                mangle.append(f"{l4} ct state new tcp flags & (syn | ack) != syn reject with tcp reset")
            if p.mode == "node":
                if r.marks:
                    marks = _map(hex(m) for m in r.marks)
                    pick = _hash(p, r.protocol, len(r.marks))
                    if r.protocol == "TCP":
                        # A SYN that meets, in its reply direction, the entry a server's stray
                        # packet left is invalid to conntrack and has no entry to carry a mark:
                        # the same hash routes it, as it routes a new flow's first packet (the
                        # handshake's next packets then find and mark that entry).
                        mangle.append(f"{l4} tcp flags & (syn | ack) == syn ct state invalid "
                                      f"meta mark set {pick} map {marks}")
                    # Not only new flows: after the idle timeout a flow's first packet may come
                    # from the server (a keepalive probe), leaving an entry whose client side is
                    # the reply direction; the client's packets must still find their node.
                    mangle.append(f"{l4} ct mark 0 ct mark set {pick} map {marks}")
                else:
                    mangle.append(f"{l4} drop")
            elif r.targets:
                targets = _map(f"{ip} . {port}" for ip, port in r.targets)
                dnat.append(f"{l4} dnat ip to {_hash(p, r.protocol, len(r.targets))} map {targets}")
            else:
                mangle.append(f"{l4} drop")
        if p.snat:
            snat.append(f"ct original ip daddr {p.vip} masquerade")
        elif p.hairpin:
            snat.append(f"ct original ip daddr {p.vip} ip saddr {{ {', '.join(IN_CLUSTER)} }} masquerade")
    node_vips = sorted({p.vip for p in plans if p.mode == "node"})
    if node_vips:
        # Only packets toward a VIP are routed by their flow's mark (replies go to the client).
        mangle.append(f"ip daddr {{ {', '.join(node_vips)} }} ct mark != 0 meta mark set ct mark")
    out.append(_chain("pick", "type filter hook prerouting priority mangle; policy accept;", mangle))
    out.append(_chain("to_backend", "type nat hook prerouting priority dstnat; policy accept;", dnat))
    out.append(_chain("masq", "type nat hook postrouting priority srcnat; policy accept;", snat))
    out.append("}\n")
    return "".join(out)


def _chain(name: str, hook: str, rules: list[str]) -> str:
    body = "".join(f"    {r}\n" for r in rules)
    return f"  chain {name} {{\n    {hook}\n{body}  }}\n"


def apply(ruleset: str) -> None:
    """Replace the chains' rules in one transaction; timeout objects are only ever added."""
    script = (f"table ip {TABLE} {{}}\n"
              "".join(f"flush chain ip {TABLE} {c}\n" for c in CHAINS)
              if _exists() else "") + ruleset
    proc = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"nft rejected the LB ruleset: {proc.stderr.strip()[:500]}")


def _exists() -> bool:
    return subprocess.run(["nft", "list", "table", "ip", TABLE], capture_output=True,
                          check=False).returncode == 0
