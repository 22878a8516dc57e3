"""What the state API answers about the Services: the state the last reconcile pass left, as a
``View`` that the pass replaces whole when it ends.

The state API reads the view and never waits for a pass. It used to answer under the pass's
lock, and a pass that waited on the apiserver (status writes, events) or on conntrack held every
answer back: under the reference phase's load, the API's 5 s timeout ran out for three concurrent
runs at once. A view is built from the pass's own state at the end of the pass, in the pass's
thread, so it is never half-updated; a reader holds one reference to a view that no one
changes afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lbconform_lab.lb.model import Json
from lbconform_lab.lb.service import ServiceState


def describe(st: ServiceState) -> Json:
    """One Service's state, as ``GET /services/NS/NAME`` answers it: its VIP, mode, parameters,
    every backend of its pool (address, ports, whether healthy, when it last changed state, its
    health check's target and last result), the healthy set, counters and defects."""
    backends = []
    for k, b in sorted(st.pool.items()):
        h = st.health(k)
        backends.append({
            "name": k, "address": b.ip, "ports": [{"protocol": p[0][0], "port": p[0][1], "target": p[1]}
                                                  for p in b.ports],
            "healthy": k in st.healthy,
            "lastChange": st.health_changed.get(k),
            "healthCheck": None if b.health is None else {
                "target": f"{b.health.protocol}://{b.health.ip}:{b.health.port}{b.health.path}",
                "passing": h.healthy if h else None, "lastResult": h.last_result if h else None,
                "checks": h.checks if h else 0},
        })
    return {"service": st.key, "uid": st.uid, "vip": st.vip, "mode": st.params.mode,
            "parameters": st.params.as_dict(), "pool": backends, "healthy": list(st.healthy),
            "counters": dict(st.counters), "defects": sorted(st.defects)}


@dataclass(frozen=True)
class View:
    """The Services as one pass left them."""

    #: Service key -> ``describe`` of it.
    services: Mapping[str, Json] = field(default_factory=lambda: MappingProxyType({}))
    #: Deleted Services whose addresses the keep-deleted-vip defect still serves: key -> VIP.
    deleted_but_kept: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def healthy(self) -> dict[str, tuple[str, set[str]]]:
        """Each Service's uid and healthy backends, by key (what a restarted LB starts from)."""
        return {k: (str(s["uid"]), set(s["healthy"])) for k, s in self.services.items()}


def build(services: Iterable[ServiceState], ghosts: Mapping[str, ServiceState]) -> View:
    """The view of the pass that holds ``services`` and ``ghosts``."""
    return View(MappingProxyType({st.key: describe(st) for st in sorted(services, key=lambda s: s.key)}),
                MappingProxyType({k: s.vip for k, s in sorted(ghosts.items())}))
