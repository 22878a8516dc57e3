"""Pod IP allocation from the node's podCIDR, the one the real node IPAM controller assigned.

Addresses are handed out round-robin, as the host-local CNI plugin does (the next free one
after the last one given, wrapping around), not lowest-free: an address a pod just left is
not given to the next pod at once, while the Service's endpoints, a load balancer's pool
and conntrack may still name it for the pod that left. A pod whose sandbox is made again (its
node's agent restarted) gets back the address its status already names, if free: a pod's IP
does not change while the pod lives.
"""

from __future__ import annotations

import ipaddress
import threading


class PodIPAM:
    """Hands out the podCIDR's addresses round-robin; .0, .1 and broadcast are never used."""

    def __init__(self, pod_cidr: str) -> None:
        self.network = ipaddress.ip_network(pod_cidr)
        self._hosts = [str(h) for h in self.network.hosts()][1:]
        self._used: set[str] = set()
        self._next = 0
        self._lock = threading.Lock()

    def allocate(self, previous: str | None = None) -> str:
        """The pod's ``previous`` address when it is this CIDR's and free, else the next free one."""
        with self._lock:
            if previous in self._hosts and previous not in self._used:
                self._used.add(previous)
                return previous
            for step in range(len(self._hosts)):
                i = (self._next + step) % len(self._hosts)
                if self._hosts[i] not in self._used:
                    self._used.add(self._hosts[i])
                    self._next = i + 1
                    return self._hosts[i]
        raise RuntimeError(f"podCIDR {self.network} is exhausted")

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)
