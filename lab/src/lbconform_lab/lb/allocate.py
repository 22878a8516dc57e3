"""Address allocation: each Service's VIP, and the index its rules are ordered and hashed by.

A Service gets the address it asks for (``spec.loadBalancerIP``) if that is free and in the VIP
range, keeps the one it already has (its status says which, after a restart too), or gets the next
free one round-robin outside the addresses held for requests. The round-robin cursor is part of
what a restarted process starts from (``saved``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from lbconform_lab import topology as topo
from lbconform_lab.lb.defects import At, apply
from lbconform_lab.lb.model import Json
from lbconform_lab.lb.service import ServiceState


@dataclass(frozen=True)
class Refusal:
    """Why a Service gets no address, as the Warning event that says so."""

    reason: str
    message: str


class Addresses:
    """The VIP range and where the next search in it starts."""

    def __init__(self, cursor: int = 0) -> None:
        #: Where the next VIP search starts (an index into VIP_CIDR's hosts outside the request range).
        self.cursor = cursor

    def allocate(self, svc: Json, used: set[str], defects: frozenset[str],
                 fresh: bool = False) -> str | Refusal:
        """The Service's address: the one it asks for or already has, else the next free one
        outside the addresses held for requests (``fresh``: the next free one whatever it has, for
        the move-ip-on-update defect). ``used``: the addresses Services hold."""
        network = ipaddress.ip_network(topo.VIP_CIDR)
        requested = apply(At.REQUEST, svc["spec"].get("loadBalancerIP"), defects)
        wanted = None if fresh else requested or next(
            (i.get("ip") for i in svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []), None)
        if wanted:
            if ipaddress.ip_address(wanted) in network and wanted not in used:
                return str(wanted)
            if requested:
                why = "in use" if wanted in used else f"not in {topo.VIP_CIDR}"
                return Refusal("LoadBalancerIPUnavailable", f"loadBalancerIP {wanted} is {why}")
        # Round-robin from the last address given, as cloud address pools do: an address a deleted
        # Service just gave up is not handed to the next Service while clients may still hold
        # flows to it.
        held = set(topo.request_range())
        hosts = [str(h) for h in network.hosts() if str(h) not in held]
        for step in range(len(hosts)):
            host = hosts[(self.cursor + step) % len(hosts)]
            if host not in used:
                self.cursor = (self.cursor + step + 1) % len(hosts)
                return host
        return Refusal("NoVIPLeft", f"no free address in {topo.VIP_CIDR}")


def next_index(held: Iterable[ServiceState]) -> int:
    """The index of a new Service: after every Service's whose rules are rendered."""
    return 1 + max((s.index for s in held), default=0)
