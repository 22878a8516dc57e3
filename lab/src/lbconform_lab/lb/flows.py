"""Forgetting pinned flows: deleting conntrack entries, so that a flow's next packet is hashed again.

A flow stays on its backend while conntrack remembers it. The LB forgets flows when the healthy set
changes (those of a removed backend, as the Service's ``backend-removal`` asks, and in pod mode the
UDP flows to a pod that left), when a port goes, and when a Service or its address goes. Deletions
are queued during a pass and run once its ruleset is in (``run``), as kube-proxy orders them:
deleted before, a packet arriving in between would make its entry again through the old rules, to
the backend that left, and a UDP flow's every datagram would keep it there (seen as a UDP flow that
never reached its new server, with many Services per pass).

A deletion is a conntrack dump filtered by the Service's address. One that fails (the kernel may
interrupt a dump when the table changes under it, and ``conntrack`` then exits with "Interrupted
system call", having deleted some entries or none) is logged and run again until it completes,
``ATTEMPTS`` runs in all, as kube-proxy and Calico's Felix retry theirs: a flow a failed deletion
missed would stay pinned where the Service asked for it to be forgotten.
"""

from __future__ import annotations

import logging
import subprocess

from lbconform_lab.lb.defects import At, Forget, apply
from lbconform_lab.lb.model import Backend, ServicePlan
from lbconform_lab.lb.params import Params
from lbconform_lab.lb.service import ServiceState

log = logging.getLogger(__name__)

#: Runs of one deletion before the LB gives up on it (each interrupted run is logged).
ATTEMPTS = 5


def on_change(params: Params) -> Forget:
    """Which flows a change of the healthy set forgets: those of the removed backends when the
    Service asks for ``backend-removal: reset``; in pod mode their UDP flows (UDP has no connection
    to drain: a flow pinned to a pod that left would go on being sent to it, every datagram
    refreshing the entry, as kube-proxy clears its own); else none, so they drain."""
    if params.backend_removal == "reset":
        return "removed"
    return "removed-udp" if params.mode == "pod" else "nothing"


class Flows:
    """The conntrack deletions of one pass."""

    def __init__(self) -> None:
        self.queue: list[tuple[ServiceState, list[str], str]] = []

    def forget(self, st: ServiceState, backend: Backend | None, protocol: str = "", port: int = 0) -> None:
        """Forget the flows of the Service (or of one backend, of one protocol, to one port), once
        the pass's ruleset is in."""
        argv = ["conntrack", "-D", "--orig-dst", st.vip, *(["-p", protocol] if protocol else []),
                *(["--orig-port-dst", str(port)] if port else [])]
        if backend is not None:
            argv += ["--mark", str(backend.mark)] if st.params.mode == "node" else ["--reply-src", backend.ip]
        self.queue.append((st, argv, f" of {backend.key}" if backend else ""))

    def healthy_set_changed(self, st: ServiceState, previous: list[str]) -> None:
        """Forget what the change from ``previous`` to the Service's healthy set asks."""
        removed = [k for k in previous if k not in st.healthy]
        what = apply(At.FORGET, on_change(st.params), st.defects)
        if what == "every":
            self.forget(st, None)
        elif what in ("removed", "removed-udp"):
            for k in removed:
                self.forget(st, st.pool.get(k) or st.ever_seen.get(k),
                            protocol="udp" if what == "removed-udp" else "")

    def close_removed_listeners(self, st: ServiceState, plan: ServicePlan) -> None:
        """Forget the flows of ports the Service no longer has: a UDP flow's every datagram would
        otherwise keep its conntrack entry, and so its way to a backend, alive."""
        listeners = frozenset((r.protocol, r.port) for r in plan.rules)
        for protocol, port in sorted(st.listeners - listeners):
            self.forget(st, None, protocol=protocol.lower(), port=port)
        st.listeners = listeners

    def run(self) -> None:
        """Run the queued deletions (the pass's ruleset is in)."""
        queue, self.queue = self.queue, []
        for st, argv, which in queue:
            count = delete(argv)
            st.counters["flowsForgotten"] += count
            log.info("%s: forgot %d flows%s", st.key, count, which)


def completed(returncode: int, stderr: str) -> bool:
    """Whether a ``conntrack -D`` run went through the whole table (it exits 1 where it deleted
    nothing, and says so)."""
    return returncode == 0 or "flow entries have been deleted" in stderr


def delete(argv: list[str]) -> int:
    """Run one deletion until it completes (at most ``ATTEMPTS`` runs); the entries it deleted."""
    count = 0
    for attempt in range(1, ATTEMPTS + 1):
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        count += sum(1 for line in out.stdout.splitlines() if line.strip())
        if completed(out.returncode, out.stderr):
            return count
        log.warning("%s: run %d of %d did not complete: %s", " ".join(argv), attempt, ATTEMPTS,
                    out.stderr.strip())
    log.error("%s: gave up after %d runs; flows it did not reach stay pinned", " ".join(argv), ATTEMPTS)
    return count
