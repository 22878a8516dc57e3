"""The reference LB's per-Service parameters (annotations) and its defects.

Every annotation is under ``lab.lbconform.io/``; ``ANNOTATIONS`` is the table the README
documents. Parsing is strict: a bad value is reported on the Service as an event and the
default is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

PREFIX: Final = "lab.lbconform.io/"
LB_CLASS: Final = "lbconform.io/lab"

MODES: Final = ("node", "nodeport", "pod")
#: Modes whose address is the LB's own: a node never has it, the LB rewrites the destination
#: (to nodeIP:nodePort), so the ingress says ``ipMode: Proxy`` and kube-proxy leaves the address
#: alone (KEP-1860); a pod's traffic to it then crosses the LB as a client's does. Node mode hands
#: the VIP to the nodes unchanged, and pod mode's DNAT to pod IPs serves in-cluster clients just
#: as well through kube-proxy: both say ``ipMode: VIP``.
PROXY_MODES: Final = ("nodeport",)


def ip_mode(mode: str) -> str:
    """The ipMode the LB publishes for a Service of this backend mode."""
    return "Proxy" if mode in PROXY_MODES else "VIP"


@dataclass(frozen=True)
class Annotation:
    name: str
    default: str
    meaning: str


ANNOTATIONS: Final = (
    Annotation("mode", "node (lab-wide: lab up --lb-mode)",
               "backends: `node` (passthrough to nodes, VIP kept), `nodeport` (DNAT to nodeIP:nodePort), "
               "`pod` (DNAT to pod IP:targetPort)"),
    Annotation("idle-timeout-seconds", "240", "a pinned flow idle this long is forgotten (conntrack)"),
    Annotation("tcp-reset", "false",
               "at idle timeout, answer the flow's next packet with a TCP reset instead of hashing it again"),
    Annotation("backend-removal", "drain",
               "`drain`: flows pinned to a removed backend go on; `reset`: they are forgotten at once"),
    Annotation("health-check-interval-seconds", "2", "time between two checks of one backend"),
    Annotation("health-check-timeout-seconds", "1", "a check that takes longer fails"),
    Annotation("health-check-healthy-threshold", "2", "consecutive passes that make a backend healthy"),
    Annotation("health-check-unhealthy-threshold", "2", "consecutive failures that make it unhealthy"),
    Annotation("health-check-protocol", "none (pod mode)",
               "pod mode only: `http` or `tcp` checks of each pod; "
               "without it the pool is the ready endpoints"),
    Annotation("health-check-path", "/readyz", "pod mode `http` checks: the path"),
    Annotation("pool-update-delay-seconds", "0",
               "pod mode: pool changes are applied in batches this long after the first one"),
)


@dataclass(frozen=True)
class Defect:
    name: str
    does: str
    correct: str


SHORT_IDLE_SECONDS: Final = 5
#: The never-forget defect's idle timeout: conntrack's own default for established TCP (5 days),
#: what an LB that sets none of its own keeps.
NEVER_FORGET_SECONDS: Final = 432_000
SLOW_UNHEALTHY_SECONDS: Final = 60.0
#: The slow-registration defect's delay: beyond the lab's declared endpoint lag (15 s).
SLOW_REGISTRATION_SECONDS: Final = 20.0

DEFECTS: Final = {d.name: d for d in (
    Defect("ignore-health", "routes to every backend of the pool, healthy or not",
           "only backends that pass their health check get new flows"),
    Defect("slow-unhealthy", "removes an unhealthy backend only a minute after it turned unhealthy",
           "a backend leaves the healthy set as soon as it fails `unhealthy-threshold` checks"),
    Defect("no-pinning", "forgets every flow whenever the healthy set changes, so each flow is hashed again",
           "an established flow keeps its backend while conntrack remembers it"),
    Defect("reset-on-change", "on any change of the pool, resets every flow of the Service",
           "flows to backends that stay are untouched by a pool change"),
    Defect("stale-pool", "pod mode: never removes a pod from the pool once it was there",
           "the pool follows the ready endpoints"),
    Defect("node-ips-in-pod-pool", "pod mode: the pool holds the nodes' IPs instead of the pods'",
           "the pool holds the ready pods' IPs"),
    Defect("snat-local",
           "externalTrafficPolicy=Local traffic reaches the node with the LB's address as source",
           "the client's address is kept"),
    Defect("short-idle", "forgets idle flows after 5 s, whatever the Service asks for",
           "the idle timeout is the Service's"),
    Defect("never-forget",
           "keeps idle flows pinned for 5 days (conntrack's default), whatever the Service asks for",
           "a flow idle for the Service's idle timeout is forgotten"),
    Defect("no-drain", "resets the pinned flows of a removed backend even when the Service asks to drain",
           "with `backend-removal: drain`, pinned flows go on"),
    Defect("ignore-source-ranges", "lets every source in, whatever loadBalancerSourceRanges says",
           "only sources inside loadBalancerSourceRanges reach the backends"),
    Defect("no-affinity", "ignores sessionAffinity: ClientIP and hashes every flow on its 5-tuple",
           "with ClientIP affinity, every flow of one client reaches the same backend"),
    Defect("drop-finalizer", "provisions a Service without the load-balancer-cleanup finalizer",
           "a provisioned Service carries the cleanup finalizer until its LB is gone"),
    Defect("ignore-updates", "keeps the ports a Service had when it was provisioned",
           "the listeners follow the Service's ports"),
    Defect("udp-stale", "pod mode: keeps sending a UDP flow to a pod that left the pool",
           "a UDP flow to a removed pod is forgotten, so its next datagram reaches a live pod"),
    Defect("wrong-idle-reset", "does the opposite of the Service's `tcp-reset` when a flow idles out",
           "an idled-out flow's next packet gets a reset exactly when the Service asks for one"),
    Defect("keep-deleted-vip", "keeps forwarding a deleted Service's address to its last backends",
           "a deleted Service's address reaches nothing once its load balancer is gone"),
    Defect("move-ip-on-update", "gives a Service a new address whenever its spec changes",
           "a Service keeps its address for as long as it is of type LoadBalancer"),
    Defect("ignore-class", "serves every LoadBalancer Service, whatever its loadBalancerClass",
           f"only Services without a class or of class `{LB_CLASS}` are served"),
    Defect("drop-udp-on-mixed", "drops the UDP ports of a Service that has TCP ports too",
           "every port of a mixed-protocol Service is forwarded"),
    Defect("ignore-requested-ip",
           "gives a Service that asks for an address (spec.loadBalancerIP) the next free one",
           "a Service gets the address it asks for, or an event that says why not"),
    Defect("sticky-affinity", "keeps ClientIP affinity after the Service drops it",
           "with sessionAffinity None, each new connection is hashed on its own"),
    Defect("sticky-source-ranges", "keeps the last loadBalancerSourceRanges after the Service clears them",
           "a Service without loadBalancerSourceRanges admits every client"),
    Defect("ignore-exclusion-label",
           "keeps nodes labelled node.kubernetes.io/exclude-from-external-load-balancers in its pools",
           "a node with that label leaves every pool, and comes back once the label is gone"),
    Defect("serial-provisioning",
           "provisions new Services one at a time, a second each, as a controller that waits on every "
           "cloud call does",
           "Services created together are provisioned together, each as fast as one alone"),
    Defect("cold-restart",
           "after a restart, takes every backend for unhealthy until it passes `healthy-threshold` checks "
           "again, so new flows fail meanwhile",
           "a restarted LB starts from the health it last saw: no flow fails while it restarts"),
    Defect("rehash-on-restart",
           "after a restart, forgets every flow and hashes with a seed of its own, so established flows "
           "move to other backends and are reset, as LB instances that share no connection table",
           "a restarted LB keeps the flows it pinned, and hashes as it did before"),
    Defect("never-healthy-again",
           "takes a backend it ever found unhealthy (`unhealthy-threshold` failed checks in a row) for "
           "unhealthy for good",
           "a backend that passes `healthy-threshold` checks in a row is healthy again"),
    Defect("no-spread", "sends every new flow to the first of its healthy backends",
           "new flows spread over every healthy backend"),
    Defect("keep-finalizer-on-type-change",
           "keeps the cleanup finalizer on a Service that stopped being type LoadBalancer (until it is "
           "deleted)",
           "a Service changed to another type loses the finalizer once its load balancer is gone (the "
           "apiserver clears its address itself)"),
    Defect("forget-a-node",
           "leaves the last node out of every pool, as an LB whose list of nodes is out of date",
           "every node not labelled for exclusion is in the pools"),
    Defect("require-node-ports",
           "serves nothing for a Service with allocateLoadBalancerNodePorts false (as an LB that sends "
           "only to node ports), without an event",
           "node and pod modes serve a Service without node ports; nodeport mode says in an event "
           "that it cannot"),
    Defect("ranges-drop-all",
           "drops every source, listed or not, once a Service has loadBalancerSourceRanges",
           "the sources loadBalancerSourceRanges lists are admitted"),
    Defect("no-hairpin",
           "nodeport mode: forwards a pod's flow to the Service's address without taking it over "
           "(no SNAT), so the backend answers the pod directly and the connection never completes",
           "a flow from inside the cluster leaves the LB with the LB's address as source, so its "
           "replies come back through the LB"),
    Defect("stale-health-check",
           "keeps checking each node where it did when it provisioned the Service (kube-proxy's /healthz "
           "for Cluster, the healthCheckNodePort for Local), whatever externalTrafficPolicy says later",
           "each node is checked where the Service's policy says now: kube-proxy's /healthz under "
           "Cluster, the Service's healthCheckNodePort under Local"),
    Defect("slow-registration",
           f"a backend that joins a provisioned Service's pool gets new flows only "
           f"{SLOW_REGISTRATION_SECONDS:g} s later, as targets that register slowly",
           "a new backend gets new flows once it is in the pool and passes its health check"),
    Defect("no-reprovision",
           "never provisions again a Service it released when its type changed, as a controller that "
           "remembers it as deleted",
           "a Service that becomes type LoadBalancer again is provisioned again"),
    Defect("wrong-ip-mode",
           "publishes the other ipMode than its mode has: VIP in nodeport mode, Proxy in pod mode "
           "(node mode keeps VIP: Proxy there would cut every flow)",
           "ipMode Proxy in nodeport mode, VIP in node and pod modes"),
)}

#: The serial-provisioning defect's pace: one new Service of a run per this many seconds.
SERIAL_PROVISIONING_SECONDS: Final = 1.0


@dataclass(frozen=True)
class Params:
    mode: str = "node"
    idle_timeout: int = 240
    tcp_reset: bool = False
    backend_removal: str = "drain"
    hc_interval: float = 2.0
    hc_timeout: float = 1.0
    hc_healthy: int = 2
    hc_unhealthy: int = 2
    hc_protocol: str = ""
    hc_path: str = "/readyz"
    pool_update_delay: float = 0.0
    errors: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "idleTimeoutSeconds": self.idle_timeout, "tcpReset": self.tcp_reset,
            "backendRemoval": self.backend_removal,
            "healthCheck": {"intervalSeconds": self.hc_interval, "timeoutSeconds": self.hc_timeout,
                            "healthyThreshold": self.hc_healthy, "unhealthyThreshold": self.hc_unhealthy,
                            "protocol": self.hc_protocol or None, "path": self.hc_path},
            "poolUpdateDelaySeconds": self.pool_update_delay,
        }


def parse(annotations: dict[str, str] | None, default_mode: str) -> Params:
    """The Service's parameters; values that do not parse fall back and are listed in ``errors``."""
    ann = {k[len(PREFIX):]: v for k, v in (annotations or {}).items() if k.startswith(PREFIX)}
    errors: list[str] = []
    base = Params(mode=default_mode)

    def number(key: str, default: float, minimum: float, integer: bool = False) -> Any:
        if key not in ann:
            return default
        try:
            value = int(ann[key]) if integer else float(ann[key])
        except ValueError:
            errors.append(f"{PREFIX}{key}={ann[key]!r} is not a number")
            return default
        if value < minimum:
            errors.append(f"{PREFIX}{key}={ann[key]!r} is below {minimum}")
            return default
        return value

    def choice(key: str, default: str, allowed: tuple[str, ...]) -> str:
        value = ann.get(key, default)
        if value not in allowed:
            errors.append(f"{PREFIX}{key}={value!r} must be one of {', '.join(allowed)}")
            return default
        return value

    return Params(
        mode=choice("mode", base.mode, MODES),
        idle_timeout=number("idle-timeout-seconds", base.idle_timeout, 1, integer=True),
        tcp_reset=choice("tcp-reset", "false", ("true", "false")) == "true",
        backend_removal=choice("backend-removal", base.backend_removal, ("drain", "reset")),
        hc_interval=number("health-check-interval-seconds", base.hc_interval, 0.2),
        hc_timeout=number("health-check-timeout-seconds", base.hc_timeout, 0.1),
        hc_healthy=number("health-check-healthy-threshold", base.hc_healthy, 1, integer=True),
        hc_unhealthy=number("health-check-unhealthy-threshold", base.hc_unhealthy, 1, integer=True),
        hc_protocol=choice("health-check-protocol", "", ("", "http", "tcp")),
        hc_path=ann.get("health-check-path", base.hc_path),
        pool_update_delay=number("pool-update-delay-seconds", base.pool_update_delay, 0),
        errors=tuple(errors),
    )
