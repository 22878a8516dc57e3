"""The values the reference LB's parts hand each other: nodes, backends, health targets, a
Service's rules. Plain frozen data, below everything that computes with it (``plan``, the
defects' table, the controller's jobs), so that none of those need import another for a type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ip: str
    index: int
    #: Labelled node.kubernetes.io/exclude-from-external-load-balancers: in no pool.
    excluded: bool = False


@dataclass(frozen=True)
class HealthTarget:
    protocol: str  # "http" or "tcp"
    ip: str
    port: int
    path: str = "/healthz"


@dataclass(frozen=True)
class Backend:
    key: str
    ip: str
    #: (protocol, service port) -> port on this backend (node port, target port, or the service port)
    ports: tuple[tuple[tuple[str, int], int], ...]
    health: HealthTarget | None
    mark: int = 0


@dataclass(frozen=True)
class PortRule:
    protocol: str
    port: int
    #: NAT modes: (ip, port) per healthy backend; node mode: the backends' marks
    targets: tuple[tuple[str, int], ...] = ()
    marks: tuple[int, ...] = ()


@dataclass(frozen=True)
class ServicePlan:
    key: str
    index: int
    vip: str
    mode: str
    rules: tuple[PortRule, ...]
    affinity: bool
    source_ranges: tuple[str, ...]
    idle_timeout: int
    tcp_reset: bool
    snat: bool
    #: NAT modes: flows from inside the cluster (pods, nodes) leave with the LB's address as
    #: source, so the backend's replies come back through the LB to be translated back.
    hairpin: bool = False
    seed: int = 0
    notes: tuple[str, ...] = field(default=())
