"""Many Services provisioned at once: when each one's address appeared, seen in one list per look.

One GET of the namespace's Services per look, not one per Service: fifty Services watched one by
one would put fifty requests on the apiserver every look and measure the watcher as much as the
implementation. The look's interval is the measurement's resolution.

The looks start before the first Service is created and go on while the others are
(``AddressWatch``, a thread of its own): fifty creations take seconds on a loaded apiserver, and an
address given while they go on is seen when it is given, not once the last creation has returned.
"""

from __future__ import annotations

import threading
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
        """Seconds from each provisioned Service's creation to its address (0 for an address seen
        before its creation's answer came back)."""
        return {name: max(0.0, self.seen[name] - self.created[name])
                for name in self.seen if name in self.created}

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


def look(got: Provisioned, names: set[str], services: list[Json], now: float) -> None:
    """Record the address of each of ``names`` that has one and was not seen before, seen ``now``."""
    for svc in services:
        name = svc["metadata"]["name"]
        address = ingress_address(svc)
        if name in names and address and name not in got.seen:
            got.addresses[name], got.seen[name] = address, now


class AddressWatch:
    """Looks at the Services every ``INTERVAL`` in a thread of its own, from before the first of
    ``names`` is created until each has an address or the deadline ``result`` sets has passed.

    ``with AddressWatch(list_services, names) as watch:``, then ``watch.created(name)`` as each
    creation returns and ``watch.result(within)`` once the last has: the deadline is the last
    creation plus ``within``. A look that fails ends the watch and ``result`` raises its error."""

    def __init__(self, list_services: Callable[[], list[Json]], names: list[str]) -> None:
        self.list_services = list_services
        self.names = set(names)
        self.got = Provisioned({})
        self.until: float | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="address-watch", daemon=True)

    def __enter__(self) -> AddressWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def created(self, name: str) -> None:
        """``name`` was created now."""
        self.got.created[name] = time.monotonic()

    def result(self, within: float) -> Provisioned:
        """What was seen once every Service has its address, or ``within`` seconds after the last
        creation."""
        self.until = max(self.got.created.values(), default=time.monotonic()) + within
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.got

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                look(self.got, self.names, self.list_services(), now)
                if len(self.got.seen) == len(self.names) or (self.until is not None and now >= self.until):
                    return
                wait = INTERVAL if self.until is None else min(INTERVAL, max(0.0, self.until - now))
                self.stop.wait(wait)
        except Exception as exc:
            self.error = exc  # raised by result()
