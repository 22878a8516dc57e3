"""What a provider is: the plugin for one load-balancer implementation.

A provider declares the features its implementation supports, the parameters it promises
(health-check interval and thresholds, idle timeout: the datasheet compares measurements
with these), the Service annotations it needs, and, where its API allows, how to read the
backend pool and the healthy set. Third parties ship providers in their own packages under
the ``lbconform.providers`` entry-point group.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Final

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.wait import FinalAnswer

if TYPE_CHECKING:
    from lbconform.kube.rawapi import RawApi


class NotSupported(FinalAnswer):
    """The provider cannot observe or do this; tests that need it report *not supported*. No wait
    retries it: it will not be otherwise later."""


#: Where a node-pool implementation's traffic enters the cluster (``Declared.entry``). Every node
#: that may serve: new connections spread over all of them (all nodes for externalTrafficPolicy
#: Cluster, the nodes with a ready endpoint for Local): cloud network LBs, the reference LB.
ENTRY_EVERY_NODE: Final = "every-node"
#: One node at a time, elected among those that may serve, takes all of a Service's traffic
#: (layer-2 announcement by ARP/NDP: MetalLB L2, kube-vip ARP).
ENTRY_ONE_NODE: Final = "one-announcing-node"

#: ``status.loadBalancer.ingress[].ipMode`` (KEP-1860), as an implementation declares it
#: (``Declared.ip_mode``). VIP: the address is the node's as much as the LB's, so kube-proxy
#: delivers a pod's traffic to it without the LB (the default, and what an absent ipMode means).
#: Proxy: kube-proxy leaves the address alone, so a pod's traffic to it goes through the LB.
IP_MODE_VIP: Final = "VIP"
IP_MODE_PROXY: Final = "Proxy"

#: Beyond a health-checked LB's time to unhealthy and one interval: a second for its data plane.
DETECTION_SLACK_SECONDS: Final = 1.0


@dataclass(frozen=True)
class Declared:
    """Values the implementation's documentation promises, in seconds where they are times.

    ``health_checks`` is False where the implementation has none of its own (MetalLB): the
    interval and thresholds are then 0 and mean nothing, and a datasheet shows "none".
    ``idle_timeout`` is None where it has no idle timeout of its own; ``idle_reset`` is True where
    a flow that idled out is answered with a TCP reset (on its next packet, or when it expires)
    without the Service asking for it (AWS NLB, Azure Standard), False where it is forgotten
    silently and hashed again on its next packet.
    ``entry`` is where its traffic enters a node pool (ENTRY_EVERY_NODE or ENTRY_ONE_NODE): what
    the suites expect of its pool, of which backends answer under policy Local, and of what a dead
    node costs. ``cleanup_finalizer`` is False where it does not hold Services with the
    ``service.kubernetes.io/load-balancer-cleanup`` finalizer (MetalLB releases addresses in its
    own controller).
    ``node_failure_detection`` is how long after a node dies the implementation may still send
    it new connections, where it says so itself (MetalLB: memberlist, not a health check); None
    means it follows from the health checks (see ``node_failure_window``).
    ``local_move_gap`` is, for ENTRY_ONE_NODE under policy Local, how long a Service's address may
    have no node to go to when its node's last local endpoint stops serving: the implementation
    moves the address only then (kube-proxy on that node stops forwarding at the same moment),
    and the next node takes it this much later (kube-vip: its Lease retry and ARP tick). 0 where
    the next node announces on the same event (MetalLB). Either way no termination ordering makes
    a rollout that replaces that endpoint hitless: a connection under way through the old node
    when the address moves reaches the next one, which has no state for it.
    ``load_balancer_class`` is the ``spec.loadBalancerClass`` the implementation serves (KEP-1959),
    None where it serves only Services without a class (its default, as MetalLB's without
    ``--lb-class``). Whatever it declares, a Service of a class it does not own is left alone.
    ``ip_mode`` is the ipMode it publishes (IP_MODE_VIP or IP_MODE_PROXY; see
    ``Provider.ip_mode`` where it depends on the Service). ``keeps_client_address`` is False where
    backends see the LB's address instead of the client's whatever the traffic policy (a proxy
    that terminates connections: Envoy in cloud-provider-kind).
    ``agent_restart_moves_address`` is True where restarting its per-node agents (``node_agents``)
    moves a Service's address to another node and back while they roll (MetalLB in layer 2: a
    speaker that stops leaves memberlist, another node announces, and the restarted one takes the
    address back when it joins again). A connection that sends while its address is on a node
    that never saw it is reset there, so the suites do not expect the connections under way while
    it moves (established ones, and a new one whose handshake spans a move) to live through that
    restart; every other new connection and the address are still held to it.
    """

    health_check_interval: float
    healthy_threshold: int
    unhealthy_threshold: int
    idle_timeout: float | None
    notes: dict[str, str] = field(default_factory=dict)
    idle_reset: bool = False
    health_checks: bool = True
    node_failure_detection: float | None = None
    entry: str = ENTRY_EVERY_NODE
    cleanup_finalizer: bool = True
    local_move_gap: float = 0.0
    load_balancer_class: str | None = None
    ip_mode: str = IP_MODE_VIP
    keeps_client_address: bool = True
    agent_restart_moves_address: bool = False

    @property
    def node_failure_window(self) -> float:
        """Seconds after a node's death within which new connections may still fail: the declared
        detection time, else the time to unhealthy plus one more interval (a check may start just
        before the death) and ``DETECTION_SLACK_SECONDS`` for the data plane to apply it."""
        if self.node_failure_detection is not None:
            return self.node_failure_detection
        return self.time_to_unhealthy + self.health_check_interval + DETECTION_SLACK_SECONDS

    @property
    def time_to_unhealthy(self) -> float:
        return self.health_check_interval * self.unhealthy_threshold

    @property
    def time_to_healthy(self) -> float:
        return self.health_check_interval * self.healthy_threshold


@dataclass(frozen=True)
class PoolMember:
    """One backend of an LB as the implementation's own API reports it.

    ``address`` is a node IP in a node pool and a pod IP in a pod pool; ``healthy`` is None
    where the implementation has no health checks (its pool is what it sends to).
    """

    address: str
    healthy: bool | None
    name: str = ""


@dataclass(frozen=True)
class ServiceRef:
    """A Service as providers look it up: clouds key their LBs by UID or ingress address."""

    namespace: str
    name: str
    uid: str = ""
    ingress: str = ""


#: Pool kinds: a node pool sends to nodes (kube-proxy forwards), a pod pool to pod IPs.
NODE_POOL, POD_POOL = "node", "pod"


class Provider(ABC):
    """Base class of every provider; subclasses override what their implementation offers."""

    #: The name users pass to ``--provider``.
    name: str = ""
    #: The implementation's modes (``--mode``); the first is the default. A report states its mode.
    modes: tuple[str, ...] = ("default",)
    mode: str = "default"
    #: The ``--provider-option NAME=VALUE`` names the provider accepts, each with one line of help.
    options_help: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: Set by ``configure``: the target cluster's API (None until then) and the user's options.
    api: RawApi | None = None
    options: Mapping[str, str] = MappingProxyType({})

    def configure(self, api: RawApi | None, options: Mapping[str, str]) -> None:
        """Called once before use, with the target cluster's API and the user's provider options.

        Providers read the cluster only through ``api``, never through a client of their own;
        an option the provider does not know is a usage error that lists the ones it knows.
        """
        unknown = sorted(set(options) - set(self.options_help))
        if unknown:
            known = ", ".join(sorted(self.options_help)) or "none"
            raise UsageError(f"--provider-option {unknown[0]}: the {self.name} provider knows "
                             f"the options {known}")
        self.api = api
        self.options = MappingProxyType(dict(options))

    def option(self, name: str, *env: str, default: str = "") -> str:
        """A provider option, else the first of ``env`` that is set, else ``default``."""
        if self.options.get(name):
            return self.options[name]
        return next((os.environ[e] for e in env if os.environ.get(e)), default)

    def check_target(self, kubeconfig_given: bool) -> None:
        """A UsageError, before anything is made, when the provider cannot read its implementation
        on the target the user named (with ``--kubeconfig``) or left to the local cluster. Any
        target will do unless a provider says otherwise."""
        return None

    def set_mode(self, mode: str) -> None:
        if mode not in self.modes:
            raise UsageError(f"--mode {mode!r}: the {self.name} provider has modes {', '.join(self.modes)}")
        self.mode = mode

    @abstractmethod
    def features(self) -> set[Feature]:
        """The features this implementation claims."""

    @abstractmethod
    def declared(self) -> Declared:
        """The parameters the implementation's documentation promises."""

    def declared_for(self, external_traffic_policy: str) -> Declared:
        """``declared()`` for a Service of this externalTrafficPolicy, where the two differ (GKE)."""
        return self.declared()

    def timeouts(self) -> Timeouts:
        """Default timeouts for this implementation (users override with --timeout)."""
        return Timeouts()

    def service_annotations(self) -> dict[str, str]:
        """Annotations every test Service needs on this implementation."""
        return {}

    def idle_timeout_to_ask(self) -> int:
        """The idle timeout, in seconds, the idle suites' Services ask for where a Service can
        choose one (``idle_timeout_annotations``): the shortest the implementation takes, so that
        the checks idle no longer than they must. ``NotSupported`` where a Service cannot choose:
        the suites then check the declared ``idle_timeout``."""
        raise NotSupported(f"the {self.name} provider cannot set a Service's idle timeout")

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        """Annotations that set a Service's idle timeout to ``seconds``, where the implementation
        lets a Service choose it; ``ValueError`` for a value it does not take."""
        raise NotSupported(f"the {self.name} provider cannot set a Service's idle timeout")

    def idle_reset_annotations(self, reset: bool) -> dict[str, str]:
        """Annotations that choose whether a flow that idled out gets a TCP reset (or is silently
        forgotten), where a Service may choose; elsewhere ``Declared.idle_reset`` says which."""
        raise NotSupported(f"the {self.name} provider cannot choose a Service's reset at idle timeout")

    def needs_node_ports(self) -> bool:
        """Whether the implementation (in its mode) sends to node ports, so cannot do without them."""
        return False

    def pod_pool_annotations(self) -> dict[str, str]:
        """Annotations that make a Service's pool hold pod IPs (container-native LB)."""
        raise NotSupported(f"the {self.name} provider has no pod-backed pools")

    def requestable_addresses(self) -> list[str]:
        """Addresses a Service may ask for that the implementation never hands out unasked (a pool
        held for requests, a cloud's reserved static IPs): each requested-address test takes one."""
        raise NotSupported(f"the {self.name} provider declares no addresses held for Services "
                           "that ask for one")

    def address_request(self, address: str) -> dict[str, str]:
        """The annotations with which a Service asks for ``address``; empty where the implementation
        reads ``spec.loadBalancerIP`` (deprecated upstream since v1.24, still the common field)."""
        return {}

    def ip_mode(self, service: ServiceRef) -> str:
        """The ipMode the implementation declares for this (existing) Service's address; the
        declaration's unless the implementation's mode for the Service decides it."""
        return self.declared().ip_mode

    def pool_kind(self, service: ServiceRef) -> str:
        """NODE_POOL or POD_POOL: what the pool of this (existing) Service holds."""
        return NODE_POOL

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        """The LB's backend pool for a Service, from the implementation's API."""
        raise NotSupported(f"the {self.name} provider cannot read backend pools")

    # --- chaos: what the chaos experiments ask of the provider -------------------------------
    def kill_node(self, name: str) -> None:
        """Make node ``name`` die as its machine would (power off): no drain, no goodbye.

        An extension point: a cloud provider stops or deletes the instance through its API.
        """
        raise NotSupported(f"the {self.name} provider cannot kill a node (extension point: kill_node)")

    def start_node(self, name: str) -> None:
        """Bring a killed node ``name`` back; a node that runs already is left as it is.

        An extension point, the counterpart of ``kill_node``.
        """
        raise NotSupported(f"the {self.name} provider cannot start a node (extension point: start_node)")

    def restart_load_balancer(self) -> None:
        """Restart the implementation's own controller in the cluster, as an upgrade or a crash
        does, and return once the new one has taken over.

        An extension point: where the implementation runs in the cluster, a rollout restart of its
        controller; a cloud's load balancers have their control plane outside anyone's reach.
        """
        raise NotSupported(f"the {self.name} provider cannot restart the implementation's controller "
                           "(extension point: restart_load_balancer)")

    def node_agents(self) -> str:
        """What per-node agents the implementation runs in the cluster (a DaemonSet that announces
        addresses or programs each node), which ``restart_node_agents`` restarts.

        An extension point: NotSupported where it runs none or no hook is written.
        """
        raise NotSupported(f"the {self.name} provider names no per-node agents of the implementation "
                           "to restart (extension point: node_agents, restart_node_agents)")

    def restart_node_agents(self) -> None:
        """Restart the implementation's per-node agents (``node_agents``) as its upgrade does, and
        return once every old one is gone and the new ones are ready."""
        raise NotSupported(self.node_agents())

    def restart_kube_proxy(self, node: str) -> None:
        """Restart kube-proxy on ``node`` only, and return once it serves its health check again.

        An extension point: where kube-proxy runs as a DaemonSet, deleting its pod on the node
        restarts it; managed clusters may run a replacement (Cilium, Dataplane V2) instead.
        """
        raise NotSupported(f"the {self.name} provider cannot restart kube-proxy "
                           "(extension point: restart_kube_proxy)")
