"""Actions on nodes; each refuses (ActivityFailed) unless the experiment may touch the node.

Killing and starting a node is the provider's (the lab cuts a node's processes and cable,
kind stops the node's container, clouds are extension points); draining, cordoning and
uncordoning are chaostoolkit-kubernetes' own, called here behind the guard so that an
experiment's rollbacks cannot touch a node it was not allowed to.
"""

from __future__ import annotations

import logging

from chaosk8s.node import actions as k8s_node
from chaoslib.exceptions import ActivityFailed

from lbconform.chaos import guard
from lbconform.chaos.context import Configuration, as_bool, kube_api, provider
from lbconform.errors import LbconformError
from lbconform.kube import objects
from lbconform.providers.base import NotSupported

__all__ = ["cordon_node", "drain_node", "kill_node", "start_node", "uncordon_node"]

log = logging.getLogger(__name__)


def kill_node(name: str, configuration: Configuration = None) -> str:
    """Kill node ``name`` as a power cut would, through the provider (``lbconform_provider``).

    Disruptive: refused unless ``allow_disruptive`` is true and ``name`` is in ``allowed_nodes``.
    Roll back with ``start_node``.
    """
    _through_provider("kill", name, configuration)
    return name


def start_node(name: str, configuration: Configuration = None) -> str:
    """Start node ``name`` again through the provider and wait until it is Ready and its
    DaemonSets' pods are Ready again (the implementation's node agents among them: the next test
    meets the whole node); a running node is left alone, so this is safe as a rollback whether
    or not the kill happened."""
    _through_provider("start", name, configuration)
    try:
        objects.wait_for_node_daemon_pods(kube_api(), name)
    except LbconformError as exc:
        raise ActivityFailed(f"start node {name}: {exc}") from None
    return name


def _through_provider(verb: str, name: str, configuration: Configuration) -> None:
    """``kill`` or ``start`` node ``name`` with the provider, once the guard allows it."""
    guard.check_nodes(configuration, [name])
    prov = provider(configuration)
    try:
        prov.kill_node(name) if verb == "kill" else prov.start_node(name)
    except (NotSupported, LbconformError, OSError) as exc:
        raise ActivityFailed(f"{verb} node {name}: {exc}") from None
    log.info("node %s: %s through the %s provider", name, verb, prov.name)


def cordon_node(name: str, configuration: Configuration = None) -> list[str]:
    """Mark node ``name`` unschedulable (chaostoolkit-kubernetes ``cordon_node``)."""
    guard.check_nodes(configuration, [name])
    cordoned: list[str] = k8s_node.cordon_node(name=name)
    return cordoned


def uncordon_node(name: str, configuration: Configuration = None) -> list[str]:
    """Mark node ``name`` schedulable again (chaostoolkit-kubernetes ``uncordon_node``)."""
    guard.check_nodes(configuration, [name])
    uncordoned: list[str] = k8s_node.uncordon_node(name=name)
    return uncordoned


def drain_node(name: str, timeout: int = 120, delete_pods_with_local_storage: bool = False,
               configuration: Configuration = None) -> list[str]:
    """Cordon node ``name`` and evict its pods, DaemonSets' excepted (chaostoolkit-kubernetes
    ``drain_nodes``, as ``kubectl drain --ignore-daemonsets``), waiting up to ``timeout``
    seconds for them to go. Roll back with ``uncordon_node``."""
    guard.check_nodes(configuration, [name])
    drained: list[str] = k8s_node.drain_nodes(
        name=name, timeout=int(timeout),
        delete_pods_with_local_storage=as_bool(delete_pods_with_local_storage))
    return drained
