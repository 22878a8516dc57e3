"""The reference LB's per-Service parameters (annotations); and, from ``defects`` where their
table is, its defects.

Every annotation is under ``lab.lbconform.io/``; ``ANNOTATIONS`` is the table docs/lab.md
documents. Parsing is strict: a bad value is reported on the Service as an event and the
default is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from lbconform_lab.lb import LB_CLASS
from lbconform_lab.lb.defects import (
    DEFECTS,
    NEVER_FORGET_SECONDS,
    SERIAL_PROVISIONING_SECONDS,
    SHORT_IDLE_SECONDS,
    SLOW_REGISTRATION_SECONDS,
    SLOW_UNHEALTHY_SECONDS,
    Defect,
)

__all__ = [
    "ANNOTATIONS", "DEFECTS", "LB_CLASS", "MODES", "NEVER_FORGET_SECONDS", "PREFIX", "PROXY_MODES",
    "SERIAL_PROVISIONING_SECONDS", "SHORT_IDLE_SECONDS", "SLOW_REGISTRATION_SECONDS",
    "SLOW_UNHEALTHY_SECONDS", "Annotation", "Defect", "Params", "ip_mode", "parse",
]

PREFIX: Final = "lab.lbconform.io/"

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
