"""Restarting the load balancer's own controller or per-node agents: the provider knows how they run."""

from __future__ import annotations

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos import guard
from lbconform.chaos.context import Configuration, provider
from lbconform.errors import LbconformError
from lbconform.providers.base import NotSupported

__all__ = ["restart_load_balancer"]


#: What ``restart_load_balancer`` restarts: the controller, or the per-node agents.
PARTS = ("controller", "node-agents")


def restart_load_balancer(part: str = "controller", configuration: Configuration = None) -> str:
    """Restart the implementation's controller (``part`` "controller") or its per-node agents
    ("node-agents"), and return once the new ones have taken over.

    Through the provider (``lbconform_provider``): the lab replaces the reference LB's process,
    MetalLB's controller Deployment or speaker DaemonSet is restarted. Disruptive: refused unless
    ``allow_disruptive`` is true.
    """
    guard.check_disruptive(configuration, "restart the load balancer")
    if part not in PARTS:
        raise ActivityFailed(f"restart the load balancer: part {part!r}: use one of {', '.join(PARTS)}")
    chosen = provider(configuration)
    try:
        if part == "controller":
            chosen.restart_load_balancer()
        else:
            chosen.restart_node_agents()
    except (NotSupported, LbconformError, OSError) as exc:
        raise ActivityFailed(f"restart the load balancer's {part}: {exc}") from None
    return chosen.name
