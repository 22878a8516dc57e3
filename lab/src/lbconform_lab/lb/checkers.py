"""The health checkers of each Service's pool, and the healthy set they give.

One ``health.Checker`` per backend that has a health target, subscribed to its target's probe
(``health.Probes``) when the backend joins the pool and unsubscribed when it leaves or its probe
changes. A new checker starts unhealthy, as a new backend does on GCP and Azure, unless the
process before this one found the backend healthy (``warm``): a restart fails no flow. A backend
gets new flows while it passes its check.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Set

from lbconform_lab.lb.defects import At, Checked, apply
from lbconform_lab.lb.health import Checker, Probes
from lbconform_lab.lb.service import ServiceState


def sync(st: ServiceState, probes: Probes, warm: Set[str], changed: Callable[[], None]) -> None:
    """A checker for every backend of the pool that has a health target, and for no other; ``warm``:
    the backends the process before this one found healthy; ``changed``: called when one flips."""
    for k in list(st.checkers):
        b, c = st.pool.get(k), st.checkers[k]
        if b is None or (b.health, st.params.hc_interval, st.params.hc_timeout) != c.key:
            probes.unsubscribe(st.checkers.pop(k))
    for k, b in st.pool.items():
        if b.health is not None and k not in st.checkers:
            c = Checker(f"{st.key}/{k}", b.health, st.params, changed,
                        healthy=apply(At.WARM, k in warm, st.defects))
            st.checkers[k] = c
            probes.subscribe(c)


def stop(st: ServiceState, probes: Probes) -> None:
    for c in st.checkers.values():
        probes.unsubscribe(c)
    st.checkers.clear()


def healthy_set(st: ServiceState) -> list[str]:
    """The backends that get new flows, in the order of their marks (then keys): those without a
    health target and those that pass it; the checkers' states it was made from are kept
    (``ServiceState.judged``)."""
    now = time.time()
    st.judged = {k: dataclasses.replace(c.state) for k, c in st.checkers.items()}
    out = []
    for k, b in sorted(st.pool.items(), key=lambda kv: (kv[1].mark, kv[0])):
        h = st.health(k)
        passing = b.health is None or (h is not None and h.healthy)
        backend = Checked(found_unhealthy=h is not None and h.found_unhealthy,
                          changed_at=h.since if h is not None and h.transitions > 0 else None,
                          joined=st.joined.get(k), was_healthy=k in st.healthy, now=now)
        if apply(At.PASSING, passing, st.defects, backend) or apply(At.LINGER, False, st.defects, backend):
            out.append(k)
    return out


def record(st: ServiceState, healthy: list[str]) -> list[str] | None:
    """Make ``healthy`` the Service's healthy set; the one before, if it changed."""
    if healthy == st.healthy:
        return None
    now = time.time()
    for k in set(healthy) ^ set(st.healthy):
        st.health_changed[k] = now
    st.counters["healthySetChanges"] += 1
    previous, st.healthy = st.healthy, healthy
    return previous
