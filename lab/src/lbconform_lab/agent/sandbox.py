"""A pod's network: its own namespace, a veth to the node, an IP from the node's podCIDR.

Routing is point-to-point, as Calico does it: the pod's default route points at a
link-local gateway that the node answers by proxy ARP, and the node routes the pod's /32
to the veth. Every packet to or from a pod thus crosses the node's IP stack, where the
real kube-proxy's nftables rules see it.

The namespace's name is recorded in the node's sandboxes directory *before* it is made, so
that ``lab down`` can remove it even if the agent dies half-way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lbconform_lab import netns as ns
from lbconform_lab import topology as topo


def _here(*args: str) -> None:
    """``ip`` in the agent's own namespace (the node's)."""
    ns.run(["ip", *args])


class Sandbox:
    """The network of one pod; ``host_network`` pods share the node's and have none."""

    def __init__(self, pod_uid: str, records: Path, host_network: bool, node_ip: str) -> None:
        self.uid = pod_uid
        self.host_network = host_network
        self.netns: str | None = None if host_network else topo.pod_netns(pod_uid)
        self.ip = node_ip if host_network else ""
        self._records = records
        digest = hashlib.sha1(pod_uid.encode()).hexdigest()[:10]
        self._host_veth = f"lv{digest}"

    def create(self, ip: str) -> None:
        if self.netns is None:
            return
        self._records.mkdir(parents=True, exist_ok=True)
        (self._records / self.netns).write_text(self.uid)
        self.ip = ip
        # A namespace is freed lazily after its last process dies, and its veth with it: a
        # pod restarted after a node kill may find its old host veth still there.
        ns.run(["ip", "link", "del", self._host_veth], check=False)
        ns.add_netns(self.netns)
        _here("link", "add", self._host_veth, "type", "veth", "peer", "name", "eth0",
              "netns", self.netns)
        ns.ip(self.netns, "addr", "add", f"{ip}/32", "dev", "eth0")
        ns.ip(self.netns, "link", "set", "eth0", "up")
        ns.ip(self.netns, "route", "add", topo.POD_GATEWAY, "dev", "eth0", "scope", "link")
        ns.ip(self.netns, "route", "add", "default", "via", topo.POD_GATEWAY, "dev", "eth0")
        Path(f"/proc/sys/net/ipv4/conf/{self._host_veth}/proxy_arp").write_text("1")
        Path(f"/proc/sys/net/ipv4/neigh/{self._host_veth}/proxy_delay").write_text("0")
        _here("link", "set", self._host_veth, "up")
        _here("route", "replace", f"{ip}/32", "dev", self._host_veth)

    def destroy(self) -> None:
        if self.netns is None:
            return
        ns.kill_processes(self.netns)
        ns.run(["ip", "link", "del", self._host_veth], check=False)
        ns.del_netns(self.netns)
        (self._records / self.netns).unlink(missing_ok=True)


def destroy_recorded(records: Path) -> None:
    """Remove every sandbox a previous run of this node's agent left (after a node kill)."""
    if not records.is_dir():
        return
    for rec in records.iterdir():
        ns.kill_processes(rec.name)
        ns.del_netns(rec.name)
        rec.unlink(missing_ok=True)
