"""The ordering that makes a pod's termination invisible to clients: u < p < g.

``u`` is the load balancer's time to stop sending new connections to a backend (its
health check interval x unhealthy threshold, as declared, or as measured), ``p`` the preStop
sleep (the app still serves, its endpoint already terminating), ``g`` the grace period
(SIGKILL at g, counted from deletion). ``d`` is how long the app itself keeps serving after
SIGTERM (agnhost ``--delay-shutdown``). An ordering says which of its inequalities hold, and
by how much the broken ones are broken, in the words a report shows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from lbconform.kube import tweaks
from lbconform.kube.manifests import Tweak
from lbconform.providers.base import Declared

Record = Callable[..., None]

#: Correct orderings leave this many health-check intervals between u and p.
INTERVALS_OF_ROOM = 2
#: And this many seconds between p and g.
GRACE_ROOM_SECONDS = 10


@dataclass(frozen=True)
class Ordering:
    u: float
    p: int | None
    g: int
    d: int = 0

    @classmethod
    def correct(cls, declared: Declared, delay_shutdown: int = 2) -> Ordering:
        """u < p < g with room: p = u + two check intervals, g = p + 10 s."""
        u = declared.time_to_unhealthy
        p = math.ceil(u + INTERVALS_OF_ROOM * declared.health_check_interval)
        return cls(u=u, p=p, g=p + GRACE_ROOM_SECONDS, d=delay_shutdown)

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
