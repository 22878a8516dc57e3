"""Restarting kube-proxy on one node: the provider knows how kube-proxy runs on its nodes."""

from __future__ import annotations

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos import guard
from lbconform.chaos.context import Configuration, provider
from lbconform.errors import LbconformError
from lbconform.providers.base import NotSupported

__all__ = ["restart_kube_proxy"]


def restart_kube_proxy(node: str, configuration: Configuration = None) -> str:
    """Restart kube-proxy on ``node`` only and return once the new one is healthy.

    Through the provider (``lbconform_provider``): the lab signals the node's kube-proxy and
    its node agent starts a new one; kind deletes the node's kube-proxy pod. Disruptive:
    refused unless ``allow_disruptive`` is true and ``node`` is in ``allowed_nodes``.
    """
    guard.check_nodes(configuration, [node])
    try:
        provider(configuration).restart_kube_proxy(node)
    except (NotSupported, LbconformError, OSError) as exc:
        raise ActivityFailed(f"restart kube-proxy on {node}: {exc}") from None
    return node
