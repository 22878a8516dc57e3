"""What the reference LB holds for one Service from pass to pass (``ServiceState``): every job of
the controller reads or writes its part of it, so it sits below them all."""

from __future__ import annotations

from dataclasses import dataclass, field

from lbconform_lab.lb.health import Checker, Health
from lbconform_lab.lb.model import Backend, HealthTarget, Json, ServicePlan
from lbconform_lab.lb.params import Params


@dataclass
class ServiceState:
    """What the LB holds for one Service."""

    key: str
    uid: str
    vip: str
    index: int
    params: Params = field(default_factory=Params)
    #: The defects this Service meets: the lab-wide ones and its run's.
    defects: frozenset[str] = frozenset()
    pool: dict[str, Backend] = field(default_factory=dict)
    checkers: dict[str, Checker] = field(default_factory=dict)
    #: Each checker's state when the healthy set was last made from them: what the view shows
    #: beside that healthy set (a checker flips between passes, from its probe's thread).
    judged: dict[str, Health] = field(default_factory=dict)
    healthy: list[str] = field(default_factory=list)
    health_changed: dict[str, float] = field(default_factory=dict)
    pending_pool: dict[str, Backend] | None = None
    pending_since: float = 0.0
    ever_seen: dict[str, Backend] = field(default_factory=dict)
    #: When (monotonic) each backend joined the pool of the already provisioned Service (the
    #: slow-registration defect holds it back for a while); backends of the first pool are not in it.
    joined: dict[str, float] = field(default_factory=dict)
    #: Each backend's first health check (the stale-health-check defect keeps it).
    first_health: dict[str, HealthTarget | None] = field(default_factory=dict)
    #: The Service's ports when it was provisioned (the ignore-updates defect keeps them).
    first_ports: list[Json] = field(default_factory=list)
    #: The harness run the Service belongs to ("" for none), and its spec as last seen (the
    #: move-ip-on-update defect gives a new address when it changes; Services have no
    #: ``metadata.generation``).
    run: str = ""
    spec: Json = field(default_factory=dict)
    #: The rules last rendered for it (the keep-deleted-vip defect goes on rendering them).
    last_plan: ServicePlan | None = None
    #: The (protocol, port) pairs it listens on: the flows of a port that goes are forgotten.
    listeners: frozenset[tuple[str, int]] = frozenset()
    counters: dict[str, int] = field(default_factory=lambda: {
        "poolChanges": 0, "healthySetChanges": 0, "flowsForgotten": 0, "reconciles": 0})

    def health(self, key: str) -> Health | None:
        """The backend's health as the healthy set was last made."""
        return self.judged.get(key)
