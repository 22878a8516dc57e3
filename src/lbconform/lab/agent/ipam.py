"""Pod IP allocation from the node's podCIDR, the one the real node IPAM controller assigned."""

from __future__ import annotations

import ipaddress
import threading


class PodIPAM:
    """Hands out the lowest free address of the podCIDR; .0, .1 and broadcast are never used."""

    def __init__(self, pod_cidr: str) -> None:
        self.network = ipaddress.ip_network(pod_cidr)
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def allocate(self) -> str:
        with self._lock:
            for i, host in enumerate(self.network.hosts()):
                if i == 0:
                    continue
                if str(host) not in self._used:
                    self._used.add(str(host))
                    return str(host)
        raise RuntimeError(f"podCIDR {self.network} is exhausted")

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)
