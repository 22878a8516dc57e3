"""Restarting the load balancer's own controller: the provider knows how it runs."""

from __future__ import annotations

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos import guard
from lbconform.chaos.context import Configuration, provider
from lbconform.errors import LbconformError
from lbconform.providers.base import NotSupported

__all__ = ["restart_load_balancer"]


def restart_load_balancer(configuration: Configuration = None) -> str:
    """Restart the implementation's controller and return once the new one has taken over.

    Through the provider (``lbconform_provider``): the lab replaces the reference LB's process,
    MetalLB's controller Deployment is restarted. Disruptive: refused unless ``allow_disruptive``
    is true.
    """
    guard.check_disruptive(configuration, "restart the load balancer")
    chosen = provider(configuration)
    try:
        chosen.restart_load_balancer()
    except (NotSupported, LbconformError, OSError) as exc:
        raise ActivityFailed(f"restart the load balancer: {exc}") from None
    return chosen.name
