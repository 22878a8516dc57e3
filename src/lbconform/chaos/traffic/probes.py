"""What the traffic saw: failed requests and resets, for the steady-state hypothesis.

Before the method no traffic has started and each count is 0. After it, a probe waits for
the recorder to finish (bounded by its planned seconds and a slack) and counts from its
result, over the whole window or only after a mark plus a grace period.
"""

from __future__ import annotations

from typing import Any

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos.traffic import recording
from lbconform.traffic.requests import RESET

__all__ = ["traffic_failures", "traffic_resets", "traffic_result"]


def _count(name: str, kinds: set[str] | None, since_mark: str, grace_seconds: float) -> int:
    rec = recording.get(name)
    if rec is None:
        return 0
    doc = rec.wait()
    since = None
    if since_mark:
        if since_mark not in rec.marks:
            raise ActivityFailed(f"traffic {name} has no mark {since_mark!r}: marks are "
                                 f"{', '.join(rec.marks) or 'none'}")
        since = rec.marks[since_mark] + float(grace_seconds)
    return recording.failures(doc, kinds, since)


def traffic_failures(name: str = "traffic", since_mark: str = "", grace_seconds: float = 0.0) -> int:
    """Requests of traffic ``name`` that failed in any way (reset, refused, timeout, closed,
    wrong answer), over the whole window or from mark ``since_mark`` plus ``grace_seconds``;
    0 while no traffic was started."""
    return _count(name, None, since_mark, grace_seconds)


def traffic_resets(name: str = "traffic", since_mark: str = "", grace_seconds: float = 0.0) -> int:
    """Requests of traffic ``name`` whose connection was reset (RST), counted as
    ``traffic_failures`` counts; 0 while no traffic was started."""
    return _count(name, {RESET}, since_mark, grace_seconds)


def traffic_result(name: str = "traffic") -> dict[str, Any]:
    """The whole result of traffic ``name`` once it finished: requests, failures by kind,
    resets, every failure with its time, the backends that answered, and the marks."""
    rec = recording.get(name)
    if rec is None:
        raise ActivityFailed(f"no traffic named {name} was started in this run")
    return {**rec.wait(), "marks": dict(rec.marks)}
