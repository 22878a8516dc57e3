"""Timeouts: one documented set, each with the most a conformant implementation may take.

A provider sets its defaults (a lab LB answers in seconds, a cloud LB in minutes); the user
overrides any of them with ``--timeout NAME=DURATION``. No wait in the harness uses a number
of its own: it names one of these.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``250ms``, ``30s``, ``5m``, ``1h`` or plain seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use 250ms, 30s, 5m, 1h or seconds)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _timeout(default: float, maximum: float, doc: str) -> Any:
    return field(default=default, metadata={"max": maximum, "doc": doc})


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``max`` in each field's metadata is the conformance limit."""

    lb_create: float = _timeout(
        60, 600, "a Service of type LoadBalancer gets status.loadBalancer.ingress")
    lb_propagation: float = _timeout(
        60, 600, "traffic to a new ingress address converges (N successes in a row)")
    lb_delete: float = _timeout(
        60, 600, "a deleted or retyped Service's load balancer and finalizer are gone")
    endpoint_lag: float = _timeout(
        30, 300, "the LB's pool follows a change of the ready endpoints")
    health_transition: float = _timeout(
        30, 120, "beyond interval x threshold, the LB acts on a health check that flipped")
    rollout: float = _timeout(
        120, 600, "a backend Deployment or DaemonSet is fully available")
    namespace_delete: float = _timeout(
        120, 600, "a test namespace and everything in it is gone")
    request: float = _timeout(
        3, 30, "one request from the client gets its answer")
    experiment: float = _timeout(
        600, 1800, "a chaos experiment ends: its method, its hypothesis and its rollbacks")
    idle_probe: float = _timeout(
        900, 3600, "checking a minutes-long declared idle timeout: an idle period just below it and one "
        "just above it, with the changes between")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_overrides(self, overrides: list[str]) -> Timeouts:
        """Apply ``NAME=DURATION`` strings; an unknown name or bad duration is an error."""
        changes: dict[str, float] = {}
        for item in overrides:
            name, sep, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in self.names():
                raise ValueError(
                    f"--timeout {item!r}: use NAME=DURATION with NAME one of {', '.join(self.names())}")
            changes[name] = parse_duration(value)
        return dataclasses.replace(self, **changes)

    def describe(self) -> list[tuple[str, float, float, str]]:
        return [(f.name, getattr(self, f.name), f.metadata["max"], f.metadata["doc"]) for f in fields(self)]
