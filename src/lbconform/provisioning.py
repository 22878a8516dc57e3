"""Many Services provisioned at once: when each one's address appeared, seen in one list per look.

One GET of the namespace's Services per look, not one per Service: fifty Services watched one by
one would put fifty requests on the apiserver every look and measure the watcher as much as the
implementation. The look's interval is the measurement's resolution.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.convergence import percentile
from lbconform.kube.rawapi import Json

#: Seconds between two looks at the Services.
INTERVAL = 0.2


def ingress_address(service: Json) -> str | None:
    """The first ingress address (IP or hostname) of a Service's status, None before it has one."""
    ingress = (service.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    first = ingress[0] if ingress else {}
    return str(first.get("ip") or first.get("hostname") or "") or None


@dataclass
class Provisioned:
    """Services by name: when each was created, and the address each got and when it was first seen
    (monotonic seconds)."""

    created: dict[str, float]
    addresses: dict[str, str] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)

    def times(self) -> dict[str, float]:
        """Seconds from each provisioned Service's creation to its address."""
        return {name: self.seen[name] - self.created[name] for name in self.seen}

    def missing(self) -> list[str]:
        return sorted(set(self.created) - set(self.seen))

    def late(self, limit: float) -> dict[str, float]:
        """The Services whose address came more than ``limit`` seconds after their creation."""
        return {name: round(t, 2) for name, t in sorted(self.times().items()) if t > limit}

    def shared(self) -> dict[str, list[str]]:
        """Addresses given to more than one Service, with their Services."""
        by_address: dict[str, list[str]] = {}
        for name, address in sorted(self.addresses.items()):
            by_address.setdefault(address, []).append(name)
        return {a: names for a, names in by_address.items() if len(names) > 1}

    def summary(self) -> dict[str, float]:
        """p50, p95 and max of the provisioning times (nearest rank); empty when none was provisioned."""
        times = list(self.times().values())
        if not times:
            return {}
        return {"p50": percentile(times, 50), "p95": percentile(times, 95), "max": max(times)}


def watch_addresses(list_services: Callable[[], list[Json]], created: dict[str, float], until: float,
                    *, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> Provisioned:
    """Look at the Services every ``INTERVAL`` until each of ``created`` has an address or the clock
    passes ``until``; what was seen, with the time of the look that first saw each address."""
    got = Provisioned(dict(created))
    while True:
        now = clock()
        for svc in list_services():
            name = svc["metadata"]["name"]
            address = ingress_address(svc)
            if name in got.created and address and name not in got.seen:
                got.addresses[name], got.seen[name] = address, now
        if not got.missing() or now >= until:
            return got
        sleep(min(INTERVAL, max(0.0, until - now)))
