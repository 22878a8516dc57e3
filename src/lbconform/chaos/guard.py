"""The disruptive switch and the allowed-nodes check, which every node-touching activity passes.

An experiment names the nodes it may touch in its configuration (``allowed_nodes``) and is
refused unless ``allow_disruptive`` is true: ``lbconform --allow-disruptive`` sets it, a
standalone user passes ``chaos run --var allow_disruptive=true``. A refusal is chaoslib's
ActivityFailed with one line that says what to do, raised before anything is touched.
"""

from __future__ import annotations

from collections.abc import Iterable

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos.context import Configuration, as_bool, as_list

__all__ = ["allowed_nodes", "check_disruptive", "check_nodes", "disruption_allowed", "disruptive_allowed",
           "switch_on"]


def disruptive_allowed(configuration: Configuration) -> bool:
    """Whether the experiment's configuration allows disruptive actions."""
    return as_bool((configuration or {}).get("allow_disruptive", False))


def allowed_nodes(configuration: Configuration) -> list[str]:
    """The nodes the experiment may touch (configuration ``allowed_nodes``)."""
    return as_list((configuration or {}).get("allowed_nodes"))


def check_disruptive(configuration: Configuration, what: str) -> None:
    """Raise ActivityFailed unless disruption is allowed, for an action that touches no node."""
    if not disruptive_allowed(configuration):
        raise ActivityFailed(f"refused to {what}: disruptive experiments need allow_disruptive "
                             "(lbconform --allow-disruptive, or chaos run --var allow_disruptive=true)")


def check_nodes(configuration: Configuration, nodes: Iterable[str]) -> None:
    """Raise ActivityFailed unless disruption is allowed and every node in ``nodes`` is allowed."""
    wanted = [n for n in nodes if n]
    if not wanted:
        raise ActivityFailed("a disruptive action was given no node to act on")
    if not disruptive_allowed(configuration):
        raise ActivityFailed(
            f"refused to touch node {', '.join(wanted)}: disruptive experiments need allow_disruptive "
            "(lbconform --allow-disruptive, or chaos run --var allow_disruptive=true)")
    allowed = allowed_nodes(configuration)
    for node in wanted:
        if node not in allowed:
            raise ActivityFailed(f"refused to touch node {node}: this experiment may touch only "
                                 f"{', '.join(allowed) or 'no node'} (configuration allowed_nodes)")


def disruption_allowed(nodes: list[str] | str, configuration: Configuration = None) -> bool:
    """Probe: true when the experiment may touch ``nodes``; fails (ActivityFailed) otherwise.

    Put first in a disruptive experiment's steady-state hypothesis with tolerance true: a
    refused experiment then fails before its method, so nothing runs and nothing is touched.
    """
    check_nodes(configuration, as_list(nodes))
    return True


def switch_on(what: str, configuration: Configuration = None) -> bool:
    """Probe: true when disruptive actions are allowed (``disruption_allowed`` for an experiment
    that touches no node); fails (ActivityFailed) otherwise."""
    check_disruptive(configuration, what)
    return True
