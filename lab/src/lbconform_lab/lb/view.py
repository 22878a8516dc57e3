"""What the state API answers about the Services: the state the last reconcile pass left, as a
``View`` that the pass replaces whole when it ends, and how long a reader waits for the pass in
progress (``Passes``).

A pass writes to the apiserver as it goes (a status, a finalizer; a release's finalizer only once the
pass's rules and view no longer hold the Service), so whoever sees such a write and then asks the API must
get the view of that pass: a reader waits for the pass in progress to end, as it waited for the
pass's lock before. It waits at most ``VIEW_WAIT_SECONDS``, then gets the last view: under the
reference phase's load one pass held that lock past the client's 5 s timeout, and three concurrent
runs broke at once on a state API that did not answer. A view is built from the pass's own state at
its end, in the pass's thread, so it is never half-updated; a reader holds one reference to a view
that no one changes afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lbconform_lab.lb.model import Json
from lbconform_lab.lb.service import ServiceState

#: How long a reader waits for the pass in progress before it gets the last pass's view (the
#: state API's clients give up after 5 s).
VIEW_WAIT_SECONDS = 3.0


class Passes:
    """The passes begun and ended, so that a reader can wait for the one in progress."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._begun = 0
        self._ended = 0

    def begin(self) -> None:
        with self._changed:
            self._begun += 1

    def end(self) -> None:
        with self._changed:
            self._ended = self._begun
            self._changed.notify_all()

    def wait_for_current(self, timeout: float) -> bool:
        """Wait until the pass in progress (if any) has ended; False if ``timeout`` ran out first."""
        with self._changed:
            target = self._begun
            return self._changed.wait_for(lambda: self._ended >= target, timeout)


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
