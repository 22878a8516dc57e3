"""What a provider is: the plugin for one load-balancer implementation.

A provider declares the features its implementation supports, the parameters it promises
(health-check interval and thresholds, idle timeout: the datasheet compares measurements
with these), the Service annotations it needs, and, where its API allows, how to read the
backend pool and the healthy set. Third parties ship providers in their own packages under
the ``lbconform.providers`` entry-point group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from lbconform.config import Timeouts
from lbconform.features import Feature


class NotSupported(Exception):
    """The provider cannot observe or do this; tests that need it report *not supported*."""


@dataclass(frozen=True)
class Declared:
    """Values the implementation's documentation promises, in seconds where they are times."""

    health_check_interval: float
    healthy_threshold: int
    unhealthy_threshold: int
    idle_timeout: float | None
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def time_to_unhealthy(self) -> float:
        return self.health_check_interval * self.unhealthy_threshold

    @property
    def time_to_healthy(self) -> float:
        return self.health_check_interval * self.healthy_threshold


@dataclass(frozen=True)
class PoolMember:
    """One backend of an LB as the implementation's own API reports it."""

    address: str
    healthy: bool | None
    name: str = ""


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str


class Provider(ABC):
    """Base class of every provider; subclasses override what their implementation offers."""

    #: The name users pass to ``--provider``.
    name: str = ""

    @abstractmethod
    def features(self) -> set[Feature]:
        """The features this implementation claims."""

    @abstractmethod
    def declared(self) -> Declared:
        """The parameters the implementation's documentation promises."""

    def timeouts(self) -> Timeouts:
        """Default timeouts for this implementation (users override with --timeout)."""
        return Timeouts()

    def service_annotations(self) -> dict[str, str]:
        """Annotations every test Service needs on this implementation."""
        return {}

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        """The LB's backend pool for a Service, from the implementation's API."""
        raise NotSupported(f"the {self.name} provider cannot read backend pools")
