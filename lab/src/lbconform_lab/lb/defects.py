"""The reference LB's defects, in one table: what each does, what a correct LB does, and where and
how it acts.

The healthy reconcile path takes each decision a defect may bend in the open, then passes the value
through ``apply(At.X, value, defects)`` at that decision's hook point (``At``): each defect of
``defects`` that acts there changes it in turn, in the table's order, and with none it comes back
as it went in. So the healthy path reads whole, and a defect is one row of ``TABLE``: its name, a
line on what it does, a line on what a correct LB does, and its acts, each a hook point and the
change it makes there. ``params.DEFECTS`` is this table by name.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar, overload

from lbconform_lab.lb import LB_CLASS
from lbconform_lab.lb.model import Backend, HealthTarget, Json, NodeInfo, PortRule, ServicePlan

T = TypeVar("T")
C = TypeVar("C")

SHORT_IDLE_SECONDS: Final = 5
#: The never-forget defect's idle timeout: conntrack's own default for established TCP (5 days),
#: what an LB that sets none of its own keeps.
NEVER_FORGET_SECONDS: Final = 432_000
SLOW_UNHEALTHY_SECONDS: Final = 60.0
#: The slow-registration defect's delay: beyond the lab's declared endpoint lag (15 s).
SLOW_REGISTRATION_SECONDS: Final = 20.0
#: The serial-provisioning defect's pace: one new Service of a run per this many seconds.
SERIAL_PROVISIONING_SECONDS: Final = 1.0
#: The ranges-drop-all defect's source range: the limited broadcast address, no client's.
ADMITS_NOBODY: Final = "255.255.255.255/32"


@dataclass(frozen=True, eq=False)
class Hook(Generic[T, C]):
    """A decision of the reconcile path that defects may bend: its value is of type ``T``, and
    ``C`` is what a defect may need to know besides (None for nothing)."""

    name: str
    #: What the value is: the healthy path's decision.
    decision: str


#: Which flows a change of a Service's healthy set forgets: all of them, those of the backends that
#: left, only their UDP flows, or none.
Forget = Literal["every", "removed", "removed-udp", "nothing"]


@dataclass(frozen=True)
class Checked:
    """One backend at a pass's health decision (the context of ``At.PASSING`` and ``At.LINGER``)."""

    #: Its checker ever found it unhealthy (``unhealthy-threshold`` failed checks in a row).
    found_unhealthy: bool
    #: When (wall clock) its health last changed, None if it never changed.
    changed_at: float | None
    #: When (monotonic) it joined the pool of the provisioned Service, None for the first pool.
    joined: float | None
    #: In the Service's healthy set before this pass.
    was_healthy: bool
    #: The pass's wall-clock time.
    now: float


@dataclass(frozen=True)
class PoolHistory:
    """What ``At.POOL``'s defect needs: the Service's mode and every backend its pool ever held."""

    mode: str
    ever_seen: Mapping[str, Backend]


class At:
    """The hook points, in the order a reconcile pass meets them (and the module that calls each)."""

    # watch: which Services the LB serves
    CLASS: Final[Hook[bool, None]] = Hook("watch.class", "the Service is of the LB's class, or of none")
    # controller: provisioning a Service it has no state for
    REPROVISION: Final[Hook[bool, None]] = Hook(
        "provision.again", "a Service released when its type changed is provisioned again")
    PACE: Final[Hook[bool, Callable[[], bool]]] = Hook(
        "provision.pace", "the Service is provisioned in this pass (context: takes its run's turn)")
    # status
    FINALIZER: Final[Hook[bool, None]] = Hook(
        "status.finalizer", "the cleanup finalizer is added to a Service being provisioned")
    # allocate
    REQUEST: Final[Hook[str | None, None]] = Hook(
        "allocate.request", "the address the Service asks for (spec.loadBalancerIP), None for none")
    KEEP_ADDRESS: Final[Hook[bool, None]] = Hook(
        "allocate.keep", "a Service whose spec changed keeps its address")
    # controller: the Service as the LB reads it
    SPEC: Final[Hook[Json, list[Json]]] = Hook(
        "read.spec", "the Service (context: its ports when it was provisioned)")
    # pools: the backends the Service may send to
    NODE_PORTS: Final[Hook[bool, None]] = Hook(
        "pool.without-node-ports", "a Service without node ports (allocateLoadBalancerNodePorts false) "
        "gets its pool")
    NODES: Final[Hook[list[NodeInfo], None]] = Hook("pool.nodes", "the nodes the LB knows, in order")
    EXCLUSION: Final[Hook[bool, None]] = Hook(
        "pool.exclusion", "nodes labelled to be excluded from load balancers leave the pools")
    POD_ADDRESS: Final[Hook[str, str | None]] = Hook(
        "pool.pod-address", "the address of a pod backend (context: its node's, None if unknown)")
    CHECK_TARGETS: Final[Hook[dict[str, Backend], Mapping[str, HealthTarget | None]]] = Hook(
        "pool.check-targets", "the pool with each backend's health check (context: each one's first)")
    POOL: Final[Hook[dict[str, Backend], PoolHistory]] = Hook("pool.update", "the pool the Service gets")
    # checkers
    WARM: Final[Hook[bool, None]] = Hook(
        "health.warm", "a new checker starts healthy: the process before this one found the backend so")
    PASSING: Final[Hook[bool, Checked]] = Hook("health.passing", "the backend gets new flows")
    LINGER: Final[Hook[bool, Checked]] = Hook(
        "health.linger", "a backend that fails its check still gets new flows")
    # flows
    KEEP_FLOWS: Final[Hook[bool, None]] = Hook(
        "flows.restart", "after a restart, the flows the process before this one pinned are kept")
    FORGET: Final[Hook[Forget, None]] = Hook(
        "flows.on-change", "which flows a change of the healthy set forgets")
    # plan: the Service's rules
    SPREAD: Final[Hook[list[Backend], None]] = Hook(
        "plan.spread", "the healthy backends new flows spread over")
    PORT_RULE: Final[Hook[PortRule, bool]] = Hook(
        "plan.port", "a port's rule (context: the Service has TCP ports)")
    AFFINITY: Final[Hook[bool, ServicePlan | None]] = Hook(
        "plan.affinity", "ClientIP affinity (context: the Service's last plan)")
    SOURCE_RANGES: Final[Hook[tuple[str, ...], ServicePlan | None]] = Hook(
        "plan.source-ranges", "the sources admitted, () for all (context: the Service's last plan)")
    IDLE: Final[Hook[int, None]] = Hook("plan.idle", "the idle timeout of the Service's flows, in seconds")
    IDLE_RESET: Final[Hook[bool, None]] = Hook(
        "plan.idle-reset", "an idled-out flow's next packet gets a TCP reset")
    CHANGE_RESET: Final[Hook[bool, None]] = Hook(
        "plan.change-reset", "a flow forgotten on a change gets a TCP reset, not a new backend")
    SNAT: Final[Hook[bool, bool]] = Hook(
        "plan.snat", "flows reach the backends with the LB's address as source "
        "(context: externalTrafficPolicy is Local)")
    HAIRPIN: Final[Hook[bool, str]] = Hook(
        "plan.hairpin", "flows from inside the cluster take the LB's address (context: the mode)")
    HASH_SALT: Final[Hook[int, int]] = Hook(
        "plan.salt", "what the hash seed mixes in (context: this process's own salt)")
    # status
    IP_MODE: Final[Hook[str, str]] = Hook("status.ip-mode", "the ipMode published (context: the mode)")
    # controller: letting a Service go
    TYPE_CHANGE: Final[Hook[bool, None]] = Hook(
        "release.type-change", "a Service no longer of type LoadBalancer loses its address and finalizer")
    KEEP_DELETED: Final[Hook[bool, None]] = Hook(
        "release.deleted", "the rules of a Service that is gone stay")


HOOKS: Final[tuple[Hook[Any, Any], ...]] = tuple(v for v in vars(At).values() if isinstance(v, Hook))


@dataclass(frozen=True)
class Act:
    """Where a defect acts, and the change it makes to the healthy value there."""

    hook: Hook[Any, Any]
    change: Callable[[Any, Any], Any]


def act(hook: Hook[T, C], change: Callable[[T, C], T]) -> Act:
    """An act, its change typed by its hook."""
    return Act(hook, change)


@dataclass(frozen=True)
class Defect:
    """One defect: its name, what it does, what a correct LB does instead, and where and how it acts."""

    name: str
    does: str
    correct: str
    acts: tuple[Act, ...] = field(default=(), compare=False)


def _defect(name: str, does: str, correct: str, *acts: Act) -> Defect:
    return Defect(name, does, correct, acts)


@dataclass
class Pace:
    """The serial-provisioning defect's clock: when it last let a new Service of each run through."""

    last: dict[str, float] = field(default_factory=dict)

    def turn(self, run: str) -> bool:
        """Whether a new Service of ``run`` may be provisioned now (one per
        ``SERIAL_PROVISIONING_SECONDS``); the others wait for a later pass."""
        now = time.monotonic()
        if now - self.last.get(run, 0.0) < SERIAL_PROVISIONING_SECONDS:
            return False
        self.last[run] = now
        return True


def _lingers(lingers: bool, b: Checked) -> bool:
    """A backend that was healthy stays so for a minute after it failed."""
    return lingers or (b.was_healthy and b.changed_at is not None
                       and b.now - b.changed_at < SLOW_UNHEALTHY_SECONDS)


def _registering(passing: bool, b: Checked) -> bool:
    """A backend that joined the provisioned Service's pool gets no new flow for a while."""
    return passing and not (b.joined is not None and time.monotonic() - b.joined < SLOW_REGISTRATION_SECONDS)


def _stale_pool(pool: dict[str, Backend], history: PoolHistory) -> dict[str, Backend]:
    return {**history.ever_seen, **pool} if history.mode == "pod" else pool


def _stale_checks(pool: dict[str, Backend], first: Mapping[str, HealthTarget | None]) -> dict[str, Backend]:
    return {k: dataclasses.replace(b, health=first[k]) for k, b in pool.items()}


def _no_udp_beside_tcp(rule: PortRule, has_tcp: bool) -> PortRule:
    """No backend for a UDP port beside TCP ones: rendered as a drop."""
    return dataclasses.replace(rule, targets=(), marks=()) if has_tcp and rule.protocol == "UDP" else rule


def _other_ip_mode(published: str, mode: str) -> str:
    """The other ipMode, except in node mode: Proxy there would cut every flow."""
    return published if mode == "node" else "VIP" if published == "Proxy" else "Proxy"


#: Every defect. At a hook point the defects act in this order: where two set one value
#: (short-idle and never-forget both on), the later one wins.
TABLE: Final = (
    _defect("ignore-health", "routes to every backend of the pool, healthy or not",
            "only backends that pass their health check get new flows",
            act(At.PASSING, lambda passing, _: True)),
    _defect("slow-unhealthy", "removes an unhealthy backend only a minute after it turned unhealthy",
            "a backend leaves the healthy set as soon as it fails `unhealthy-threshold` checks",
            act(At.LINGER, _lingers)),
    _defect("no-pinning", "forgets every flow whenever the healthy set changes, so each flow is hashed again",
            "an established flow keeps its backend while conntrack remembers it",
            act(At.FORGET, lambda forget, _: "every")),
    _defect("reset-on-change", "on any change of the pool, resets every flow of the Service",
            "flows to backends that stay are untouched by a pool change",
            act(At.FORGET, lambda forget, _: "every"),
            # the flows it forgets on a change get a reset, not a new backend
            act(At.CHANGE_RESET, lambda reset, _: True)),
    _defect("stale-pool", "pod mode: never removes a pod from the pool once it was there",
            "the pool follows the ready endpoints",
            act(At.POOL, _stale_pool)),
    _defect("node-ips-in-pod-pool", "pod mode: the pool holds the nodes' IPs instead of the pods'",
            "the pool holds the ready pods' IPs",
            act(At.POD_ADDRESS, lambda address, node_ip: address if node_ip is None else node_ip)),
    _defect("snat-local",
            "externalTrafficPolicy=Local traffic reaches the node with the LB's address as source",
            "the client's address is kept",
            act(At.SNAT, lambda snat, local: local)),
    _defect("short-idle", "forgets idle flows after 5 s, whatever the Service asks for",
            "the idle timeout is the Service's",
            act(At.IDLE, lambda idle, _: SHORT_IDLE_SECONDS)),
    _defect("never-forget",
            "keeps idle flows pinned for 5 days (conntrack's default), whatever the Service asks for",
            "a flow idle for the Service's idle timeout is forgotten",
            act(At.IDLE, lambda idle, _: NEVER_FORGET_SECONDS)),
    _defect("no-drain", "resets the pinned flows of a removed backend even when the Service asks to drain",
            "with `backend-removal: drain`, pinned flows go on",
            act(At.FORGET, lambda forget, _: forget if forget == "every" else "removed")),
    _defect("ignore-source-ranges", "lets every source in, whatever loadBalancerSourceRanges says",
            "only sources inside loadBalancerSourceRanges reach the backends",
            act(At.SOURCE_RANGES, lambda ranges, _: ())),
    _defect("no-affinity", "ignores sessionAffinity: ClientIP and hashes every flow on its 5-tuple",
            "with ClientIP affinity, every flow of one client reaches the same backend",
            act(At.AFFINITY, lambda affinity, _: False)),
    _defect("drop-finalizer", "provisions a Service without the load-balancer-cleanup finalizer",
            "a provisioned Service carries the cleanup finalizer until its LB is gone",
            act(At.FINALIZER, lambda add, _: False)),
    _defect("ignore-updates", "keeps the ports a Service had when it was provisioned",
            "the listeners follow the Service's ports",
            act(At.SPEC, lambda svc, first_ports: {**svc, "spec": {**svc["spec"], "ports": first_ports}})),
    _defect("udp-stale", "pod mode: keeps sending a UDP flow to a pod that left the pool",
            "a UDP flow to a removed pod is forgotten, so its next datagram reaches a live pod",
            act(At.FORGET, lambda forget, _: "nothing" if forget == "removed-udp" else forget)),
    _defect("wrong-idle-reset", "does the opposite of the Service's `tcp-reset` when a flow idles out",
            "an idled-out flow's next packet gets a reset exactly when the Service asks for one",
            act(At.IDLE_RESET, lambda reset, _: not reset)),
    _defect("keep-deleted-vip", "keeps forwarding a deleted Service's address to its last backends",
            "a deleted Service's address reaches nothing once its load balancer is gone",
            act(At.KEEP_DELETED, lambda keep, _: True)),
    _defect("move-ip-on-update", "gives a Service a new address whenever its spec changes",
            "a Service keeps its address for as long as it is of type LoadBalancer",
            act(At.KEEP_ADDRESS, lambda keep, _: False)),
    _defect("ignore-class", "serves every LoadBalancer Service, whatever its loadBalancerClass",
            f"only Services without a class or of class `{LB_CLASS}` are served",
            act(At.CLASS, lambda own, _: True)),
    _defect("drop-udp-on-mixed", "drops the UDP ports of a Service that has TCP ports too",
            "every port of a mixed-protocol Service is forwarded",
            act(At.PORT_RULE, _no_udp_beside_tcp)),
    _defect("ignore-requested-ip",
            "gives a Service that asks for an address (spec.loadBalancerIP) the next free one",
            "a Service gets the address it asks for, or an event that says why not",
            act(At.REQUEST, lambda requested, _: None)),
    _defect("sticky-affinity", "keeps ClientIP affinity after the Service drops it",
            "with sessionAffinity None, each new connection is hashed on its own",
            act(At.AFFINITY, lambda affinity, last: affinity or (last is not None and last.affinity))),
    _defect("sticky-source-ranges", "keeps the last loadBalancerSourceRanges after the Service clears them",
            "a Service without loadBalancerSourceRanges admits every client",
            act(At.SOURCE_RANGES, lambda ranges, last: last.source_ranges if last is not None and not ranges
                else ranges)),
    _defect("ignore-exclusion-label",
            "keeps nodes labelled node.kubernetes.io/exclude-from-external-load-balancers in its pools",
            "a node with that label leaves every pool, and comes back once the label is gone",
            act(At.EXCLUSION, lambda excludes, _: False)),
    _defect("serial-provisioning",
            "provisions new Services one at a time, a second each, as a controller that waits on every "
            "cloud call does",
            "Services created together are provisioned together, each as fast as one alone",
            act(At.PACE, lambda go, take_turn: go and take_turn())),
    _defect("cold-restart",
            "after a restart, takes every backend for unhealthy until it passes `healthy-threshold` checks "
            "again, so new flows fail meanwhile",
            "a restarted LB starts from the health it last saw: no flow fails while it restarts",
            act(At.WARM, lambda warm, _: False)),
    _defect("rehash-on-restart",
            "after a restart, forgets every flow and hashes with a seed of its own, so established flows "
            "move to other backends and are reset, as LB instances that share no connection table",
            "a restarted LB keeps the flows it pinned, and hashes as it did before",
            act(At.KEEP_FLOWS, lambda keep, _: False),
            act(At.HASH_SALT, lambda salt, own_salt: own_salt)),
    _defect("never-healthy-again",
            "takes a backend it ever found unhealthy (`unhealthy-threshold` failed checks in a row) for "
            "unhealthy for good",
            "a backend that passes `healthy-threshold` checks in a row is healthy again",
            act(At.PASSING, lambda passing, b: passing and not b.found_unhealthy)),
    _defect("no-spread", "sends every new flow to the first of its healthy backends",
            "new flows spread over every healthy backend",
            act(At.SPREAD, lambda backends, _: backends[:1])),
    _defect("keep-finalizer-on-type-change",
            "keeps the cleanup finalizer on a Service that stopped being type LoadBalancer (until it is "
            "deleted)",
            "a Service changed to another type loses the finalizer once its load balancer is gone (the "
            "apiserver clears its address itself)",
            act(At.TYPE_CHANGE, lambda lets_go, _: False)),
    _defect("forget-a-node",
            "leaves the last node out of every pool, as an LB whose list of nodes is out of date",
            "every node not labelled for exclusion is in the pools",
            act(At.NODES, lambda nodes, _: nodes[:-1])),
    _defect("require-node-ports",
            "serves nothing for a Service with allocateLoadBalancerNodePorts false (as an LB that sends "
            "only to node ports), without an event",
            "node and pod modes serve a Service without node ports; nodeport mode says in an event "
            "that it cannot",
            act(At.NODE_PORTS, lambda serves, _: False)),
    _defect("ranges-drop-all",
            "drops every source, listed or not, once a Service has loadBalancerSourceRanges",
            "the sources loadBalancerSourceRanges lists are admitted",
            act(At.SOURCE_RANGES, lambda ranges, _: (ADMITS_NOBODY,) if ranges else ranges)),
    _defect("no-hairpin",
            "nodeport mode: forwards a pod's flow to the Service's address without taking it over "
            "(no SNAT), so the backend answers the pod directly and the connection never completes",
            "a flow from inside the cluster leaves the LB with the LB's address as source, so its "
            "replies come back through the LB",
            act(At.HAIRPIN, lambda hairpin, mode: hairpin and mode != "nodeport")),
    _defect("stale-health-check",
            "keeps checking each node where it did when it provisioned the Service (kube-proxy's /healthz "
            "for Cluster, the healthCheckNodePort for Local), whatever externalTrafficPolicy says later",
            "each node is checked where the Service's policy says now: kube-proxy's /healthz under "
            "Cluster, the Service's healthCheckNodePort under Local",
            act(At.CHECK_TARGETS, _stale_checks)),
    _defect("slow-registration",
            f"a backend that joins a provisioned Service's pool gets new flows only "
            f"{SLOW_REGISTRATION_SECONDS:g} s later, as targets that register slowly",
            "a new backend gets new flows once it is in the pool and passes its health check",
            act(At.PASSING, _registering)),
    _defect("no-reprovision",
            "never provisions again a Service it released when its type changed, as a controller that "
            "remembers it as deleted",
            "a Service that becomes type LoadBalancer again is provisioned again",
            act(At.REPROVISION, lambda again, _: False)),
    _defect("wrong-ip-mode",
            "publishes the other ipMode than its mode has: VIP in nodeport mode, Proxy in pod mode "
            "(node mode keeps VIP: Proxy there would cut every flow)",
            "ipMode Proxy in nodeport mode, VIP in node and pod modes",
            act(At.IP_MODE, _other_ip_mode)),
)

#: The table by name.
DEFECTS: Final = {d.name: d for d in TABLE}


def _changes_by_hook() -> dict[Hook[Any, Any], list[tuple[str, Callable[[Any, Any], Any]]]]:
    changes: dict[Hook[Any, Any], list[tuple[str, Callable[[Any, Any], Any]]]] = {}
    for d in TABLE:
        for a in d.acts:
            changes.setdefault(a.hook, []).append((d.name, a.change))
    return changes


#: Each hook's changes, in the table's order: hook -> [(defect, change)].
_CHANGES: Final = _changes_by_hook()


@overload
def apply(hook: Hook[T, None], value: T, defects: Set[str]) -> T: ...
@overload
def apply(hook: Hook[T, C], value: T, defects: Set[str], context: C) -> T: ...
def apply(hook: Hook[Any, Any], value: Any, defects: Set[str], context: Any = None) -> Any:
    """``value``, the healthy path's decision at ``hook``, as the defects of ``defects`` that act
    there make it, one after the other in the table's order: unchanged without any."""
    if defects:
        for name, change in _CHANGES.get(hook, ()):
            if name in defects:
                value = change(value, context)
    return value
