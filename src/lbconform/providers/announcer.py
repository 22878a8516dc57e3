"""Providers of implementations that announce Service addresses from one node each and forward
nothing themselves (MetalLB in layer 2, kube-vip with ARP)."""

from __future__ import annotations

from lbconform.features import Feature
from lbconform.providers.base import ENTRY_ONE_NODE, Declared
from lbconform.providers.nodepower import LocalNodePower


class Announcer(LocalNodePower):
    """A provider of an implementation that announces Service addresses from one node each and
    forwards nothing itself (MetalLB in layer 2, kube-vip with ARP): kube-proxy on that node
    does the rest. So it claims neither health-check transitions (it probes nothing), nor idle
    timeouts (flows are the node's conntrack entries), nor pod-IP pools (traffic lands on a
    node). It has no machines of its own either: on a local cluster (the lab) its node chaos
    is that cluster's (``lbconform.localcluster``); on other clusters a subclass brings its own."""

    def features(self) -> set[Feature]:
        return set(Feature) - {Feature.HEALTH_CHECK_TRANSITIONS, Feature.IDLE_TIMEOUT,
                               Feature.POD_BACKEND_POOL}

    @staticmethod
    def announcing(failover: float, cleanup_finalizer: bool, notes: dict[str, str],
                   local_move_gap: float = 0.0, agent_restart_moves_address: bool = False) -> Declared:
        """The declaration of such an implementation: one entry node, no health checks, no idle
        timeout; a node's death costs ``failover`` seconds, moving a Local Service's address off a
        node that lost its last endpoint ``local_move_gap``, and a restart of its per-node agents
        may move the address and back (``Declared.agent_restart_moves_address``)."""
        return Declared(health_check_interval=0.0, healthy_threshold=0, unhealthy_threshold=0,
                        idle_timeout=None, health_checks=False, node_failure_detection=failover,
                        entry=ENTRY_ONE_NODE, cleanup_finalizer=cleanup_finalizer, notes=notes,
                        local_move_gap=local_move_gap,
                        agent_restart_moves_address=agent_restart_moves_address)
