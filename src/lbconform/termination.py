"""The ordering that makes a pod's termination invisible to clients: u < p < g.

``u`` is the load balancer's time to stop sending new connections to a backend (its
health check interval x unhealthy threshold, as declared, or as measured), ``p`` the preStop
sleep (the app still serves, its endpoint already terminating), ``g`` the grace period
(SIGKILL at g, counted from deletion). ``d`` is how long the app itself keeps serving after
SIGTERM (agnhost ``--delay-shutdown``). An ordering says which of its inequalities hold, and
by how much the broken ones are broken, in the words a report shows. ``observe_termination``
watches one pod's termination from outside and reports u, p and g as they happened.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.kube.workload import Workload
from lbconform.lb import LoadBalancer
from lbconform.providers.base import ENTRY_ONE_NODE, Declared, NotSupported, Provider
from lbconform.traffic.timeline import Timeline
from lbconform.wait import LbWaitTimeout, poll_until

Record = Callable[..., None]

#: Correct orderings leave this many health-check intervals between u and p, and at least
#: MIN_ROOM_SECONDS (where the LB declares no checks).
INTERVALS_OF_ROOM = 2
MIN_ROOM_SECONDS = 1
#: And this many seconds between p and g.
GRACE_ROOM_SECONDS = 10
#: Under policy Cluster a node sends to any endpoint, so a terminating pod leaves the traffic when
#: the cluster has taken its endpoint out everywhere: the EndpointSlice controller's update (the
#: endpoint stops being ready at the pod's deletion), then each node's kube-proxy's next sync. This
#: is the cluster's time, not the LB's, and a correct preStop outlasts it: on this project's CI
#: machine, busy with several runs and a second lab on two cores, a node's kube-proxy still sent a
#: terminating pod new connections 7.4 s after its deletion.
ENDPOINT_PROPAGATION_SECONDS = 10


@dataclass(frozen=True)
class Ordering:
    u: float
    p: int | None
    g: int
    d: int = 0

    @classmethod
    def correct(cls, declared: Declared, delay_shutdown: int = 2, u: float | None = None) -> Ordering:
        """u < p < g with room: p = u + two check intervals (a second at least), g = p + 10 s; ``u``
        the declared time to unhealthy unless given."""
        u = declared.time_to_unhealthy if u is None else u
        p = math.ceil(u + max(INTERVALS_OF_ROOM * declared.health_check_interval, MIN_ROOM_SECONDS))
        return cls(u=u, p=p, g=p + GRACE_ROOM_SECONDS, d=delay_shutdown)

    @classmethod
    def for_rollout(cls, provider: Provider, policy: str) -> Ordering:
        """The correct ordering for pods replaced under load behind a Service of this policy, or
        NotSupported where a Local Service's address lives on one announcing node at a time
        (``Declared.entry`` ENTRY_ONE_NODE). When that node's last local endpoint stops serving,
        the address moves: the connections under way through the old node at that instant reach
        a node with no state for them and are reset (seen with MetalLB in layer 2, about one
        request in three hundred at 20 new connections a second), and where the provider declares
        a ``local_move_gap`` the address has no node at all for that long. No ordering makes
        either hitless.

        Under policy Cluster, ``u`` is the longer of the LB's time to unhealthy and the cluster's
        endpoint propagation (``ENDPOINT_PROPAGATION_SECONDS``): a node the LB keeps sending to
        forwards to the pod until its kube-proxy has removed it."""
        declared = provider.declared_for(policy)
        if declared.local_move_gap:
            raise NotSupported(
                f"the {provider.name} provider declares that when the node holding a Local Service's "
                f"address loses its last serving endpoint, the address has no node for up to "
                f"{declared.local_move_gap:g} s ({declared.notes.get('local_move', 'local_move_gap')}): "
                "it does not claim hitless pod replacement under policy Local")
        if policy == "Local" and declared.entry == ENTRY_ONE_NODE:
            raise NotSupported(
                f"the {provider.name} provider declares that one announcing node takes all of a "
                "Service's traffic: under policy Local the address moves when that node's last serving "
                "endpoint goes, and a connection under way through it at that instant reaches a node "
                "with no state for it and is reset; it does not claim hitless pod replacement there")
        u = declared.time_to_unhealthy
        return cls.correct(declared, u=max(u, ENDPOINT_PROPAGATION_SECONDS) if policy == "Cluster" else u)

    def at_least(self, p: int) -> Ordering:
        """The same ordering with a preStop of at least ``p`` (and the grace period moved along)."""
        new_p = max(self.p or 0, p)
        return dataclasses.replace(self, p=new_p, g=max(self.g, new_p + GRACE_ROOM_SECONDS))

    def with_u(self, u: float) -> Ordering:
        return dataclasses.replace(self, u=u)

    def tweaks(self) -> list[Tweak]:
        out = [tweaks.grace_period(self.g), tweaks.delay_shutdown(self.d)]
        if self.p and self.p >= self.g:
            out.append(tweaks.pre_stop_exec_sleep(self.p))
        elif self.p:
            out.append(tweaks.pre_stop_sleep(self.p))
        return out

    @property
    def serving_until(self) -> float:
        """Seconds after deletion at which the app stops answering: after preStop, SIGTERM and
        the app's own delay, unless SIGKILL comes first."""
        return min((self.p or 0) + self.d, self.g)

    def broken(self) -> list[str]:
        """Each inequality that does not hold, and by how much."""
        out = []
        p = self.p or 0
        if self.p is None:
            out.append(f"no preStop: the app stops {self.d}s after deletion, the LB needs u={self.u:g}s")
        elif p <= self.u:
            out.append(f"p < u: preStop {p}s is {self.u - p:g}s shorter than the LB's time to "
                       f"unhealthy {self.u:g}s")
        if self.g <= p:
            out.append(f"g < p: grace period {self.g}s cuts preStop {p}s short by {p - self.g}s")
        return out

    def exposed(self) -> float:
        """Seconds during which the LB may still send new connections to an app that no longer
        answers (0 when the ordering holds)."""
        return max(0.0, self.u - self.serving_until)

    def record(self, measure: Record) -> None:
        """u, p and g as measurements of the test (u as the provider declares it)."""
        measure("termination_u", self.u, "s")
        measure("termination_p", float(self.p or 0), "s")
        measure("termination_g", float(self.g), "s")


#: How often a termination is looked at: finer than any health-check interval.
OBSERVE_SECONDS = 0.1


@dataclass
class Observed:
    """One pod's termination as seen from outside, in seconds after its deletion: ``u`` when the
    LB stopped sending new connections to it, ``p`` when its endpoint stopped serving (the app
    got SIGTERM at the end of preStop; seen within one readiness period), ``g`` when the pod was
    gone (at the grace period, or earlier if the app exited first). None: not seen."""

    u: float | None = None
    p: float | None = None
    g: float | None = None
    deleted_at: float = field(default=0.0, repr=False)

    def record(self, measure: Record) -> None:
        for name, value in (("u", self.u), ("p", self.p), ("g", self.g)):
            if value is not None:
                measure(f"termination_{name}_observed", round(value, 2), "s")


def observe_termination(lb: LoadBalancer, backends: Workload, pod: str, timeline: Timeline,
                        timeout: float) -> Observed:
    """Delete ``pod`` and watch it go: the LB dropping its address (its node's, in a node pool
    with one backend per node), its endpoint no longer serving, the pod gone; each first sight
    is a timeline event. Returns once the pod is gone and the LB dropped it, or a health
    transition after the pod went."""
    pods = {p["metadata"]["name"]: p for p in backends.pods()}
    node = pods[pod]["spec"].get("nodeName", "")
    address = (lb.target.node_addresses().get(node, "") if lb.is_node_pool()
               else pods[pod].get("status", {}).get("podIP", ""))
    seen = Observed(deleted_at=time.monotonic())
    timeline.event("pod deleted", pod)
    backends.delete_pod(pod)

    def since() -> float:
        return time.monotonic() - seen.deleted_at

    def look() -> bool:
        if seen.u is None and address not in lb.healthy():
            seen.u = since()
            timeline.event("LB dropped backend", address)
        if seen.p is None and not lb.endpoint_serving(pod):
            seen.p = since()
            timeline.event("endpoint not serving", pod)
        if seen.g is None and pod not in backends.pod_names_ever():
            seen.g = since()
            timeline.event("pod gone", pod)
        return seen.g is not None and (seen.u is not None
                                       or since() - seen.g > lb.target.timeouts.health_transition)

    poll_until(look, timeout=timeout, interval=OBSERVE_SECONDS, timeout_error=LbWaitTimeout,
               description=f"pod {backends.namespace}/{pod} to be gone and out of the LB's healthy set")
    return seen
