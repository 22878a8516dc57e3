"""A disruption's failures are set against the last event before each."""

from __future__ import annotations

from lbconform.traffic.disruption import Disruption
from lbconform.traffic.requests import OK, TIMEOUT, Failure, LoopResult
from lbconform.traffic.timeline import Timeline


def test_failures_are_attributed_to_the_event_before_them() -> None:
    timeline = Timeline(1000.0)
    timeline.event("rollout started", "Deployment backend", at=1001.0)
    timeline.event("pod terminating", "backend-a", at=1002.0)
    result = LoopResult(sent=3)
    result.outcomes.update({OK: 1, TIMEOUT: 2})
    result.failures += [Failure(1000.5, TIMEOUT, "TimeoutError: "),
                        Failure(1003.25, TIMEOUT, "TimeoutError: ")]
    d = Disruption(result, timeline, wire_resets=None, wire_note="not measured: needs root")
    assert d.attributed() == ["+0.50s timeout (TimeoutError: ) before any event",
                              "+3.25s timeout (TimeoutError: ) after pod terminating backend-a"]
    text = d.describe()
    assert "3 requests, 2 failed" in text and "0 on the socket, not measured on the wire" in text
