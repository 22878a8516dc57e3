"""The lab's wiring: namespaces, the fabric bridge, veths, addresses, routes.

Topology::

    lbc-client (203.0.113.10) ── lbc-lb (203.0.113.1 | 198.19.0.2) ──┐
                                                      fabric0 bridge in lbc-fabric (198.19.0.1,
                                                      where the control plane listens)
    lbc-node-1 (198.19.0.11) ── … ── lbc-node-N (198.19.0.10+N) ─────┘

The LB namespace is the client's only way in, as a cloud load balancer is the internet's:
nodes route the client range back through it, which is what keeps the client's source IP
visible for externalTrafficPolicy=Local. No namespace has a route out of the lab.
"""

from __future__ import annotations

from collections.abc import Callable

from lbconform_lab import netns as ns
from lbconform_lab import topology as topo

Record = Callable[[str], None]


def plan(nodes: list[topo.Node]) -> list[str]:
    """Every namespace the lab makes, in creation order."""
    return [topo.FABRIC_NS, topo.LB_NS, topo.CLIENT_NS, *(n.netns for n in nodes)]


def build(nodes: list[topo.Node], record: Record, vips_on_link: bool = False) -> None:
    """Make the namespaces and links; ``record`` is called with each name before it is made.

    With ``vips_on_link`` the VIP range is on the fabric itself, for an implementation whose
    nodes answer ARP for the VIPs (MetalLB layer 2): ``lbc-lb`` and the fabric then ask who has
    a VIP rather than route it to the reference LB.
    """
    for name in plan(nodes):
        record(name)
        ns.add_netns(name)
    f = topo.FABRIC_NS
    ns.ip(f, "link", "add", topo.FABRIC_BRIDGE, "type", "bridge")
    ns.ip(f, "link", "set", topo.FABRIC_BRIDGE, "up")
    ns.addr(f, topo.FABRIC_BRIDGE, f"{topo.APISERVER_IP}/{topo.FABRIC_PREFIXLEN}")
    ns.route_replace(f, topo.CLIENT_CIDR, "via", topo.LB_FABRIC_IP)
    if vips_on_link:
        ns.route_replace(f, topo.VIP_CIDR, "dev", topo.FABRIC_BRIDGE)
    else:
        ns.route_replace(f, topo.VIP_CIDR, "via", topo.LB_FABRIC_IP)

    _fabric_leg(topo.LB_NS, "fab-lb", topo.LB_FABRIC_IP)
    ns.veth(topo.LB_NS, "eth1", topo.CLIENT_NS, "eth0")
    ns.addr(topo.LB_NS, "eth1", f"{topo.LB_CLIENT_IP}/24")
    ns.addr(topo.CLIENT_NS, "eth0", f"{topo.CLIENT_IP}/24")
    ns.route_replace(topo.CLIENT_NS, "default", "via", topo.LB_CLIENT_IP)
    if vips_on_link:
        ns.route_replace(topo.LB_NS, topo.VIP_CIDR, "dev", "eth0")  # its fabric leg

    for node in nodes:
        _fabric_leg(node.netns, node.fabric_port, node.ip)
        ns.route_replace(node.netns, "default", "via", topo.APISERVER_IP)
        ns.route_replace(node.netns, topo.CLIENT_CIDR, "via", topo.LB_FABRIC_IP)
    for router in (topo.FABRIC_NS, topo.LB_NS, *(n.netns for n in nodes)):
        ns.router_sysctls(router)


def _fabric_leg(netns: str, port: str, address: str) -> None:
    ns.ip(topo.FABRIC_NS, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ns.ip(topo.FABRIC_NS, "link", "set", port, "master", topo.FABRIC_BRIDGE, "up")
    ns.ip(netns, "link", "set", "eth0", "up")
    ns.addr(netns, "eth0", f"{address}/{topo.FABRIC_PREFIXLEN}")


def set_node_link(node: topo.Node, up: bool) -> None:
    """Cut or restore a node's only cable, on the fabric side."""
    ns.link_state(topo.FABRIC_NS, node.fabric_port, up)


def reset_node_addresses(node: topo.Node) -> None:
    """Leave a node's link with its own address only, as a machine comes back from a reboot: the
    addresses its programs added (kube-vip's VIPs) went with them. A killed node's namespace
    outlives its processes, and a VIP left on it would answer ARP for a node that now holds it."""
    for line in ns.ip(node.netns, "-o", "-4", "addr", "show", "dev", "eth0").splitlines():
        cidr = line.split(" inet ", 1)[1].split()[0]
        if cidr.split("/")[0] != node.ip:
            ns.ip(node.netns, "addr", "del", cidr, "dev", "eth0")
