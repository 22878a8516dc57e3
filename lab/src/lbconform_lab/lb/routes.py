"""Policy routing for node mode's passthrough: a flow's fwmark picks its node, fwmark of node K ->
routing table K -> the VIPs via node K (the nftables rules set the marks)."""

from __future__ import annotations

import subprocess

from lbconform_lab import topology as topo
from lbconform_lab.lb.model import NodeInfo
from lbconform_lab.lb.plan import MARK_BASE


class NodeRoutes:
    """The routing rule and table of every node, added once per node address."""

    def __init__(self) -> None:
        #: Node index -> the address its table routes the VIPs via.
        self.routed: dict[int, str] = {}

    def ensure(self, nodes: list[NodeInfo]) -> None:
        """A rule and a route for each node. A rule a process before this one added stays: taken
        away for a moment, it would drop the packets of every flow to that node."""
        for n in nodes:
            if self.routed.get(n.index) == n.ip:
                continue
            mark = MARK_BASE + n.index
            rule = ["fwmark", hex(mark), "lookup", str(mark)]
            there = subprocess.run(["ip", "rule", "show", *rule], capture_output=True, text=True, check=False)
            if not there.stdout.strip():
                subprocess.run(["ip", "rule", "add", *rule], check=True)
            subprocess.run(["ip", "route", "replace", topo.VIP_CIDR, "via", n.ip, "table", str(mark)],
                           check=True)
            self.routed[n.index] = n.ip
