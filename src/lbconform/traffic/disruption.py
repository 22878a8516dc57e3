"""Traffic through a disruption: a request loop runs from the client while something happens
to the backends (a rolling update, a pod deletion), and every failure is set against what was
happening when it occurred.

Resets are counted twice: on the socket (the request loop's ``reset`` outcomes) and on the
wire (TCP RSTs from the load balancer's address to the client, captured in the client's
namespace), and a suite asserts that the two agree. Where this process may not capture, the
wire count is *not measured*, said once, and never taken for zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lbconform.traffic.capture import ResetCapture, capture_available, from_server
from lbconform.traffic.client import Client
from lbconform.traffic.requests import NEW_CONNECTION, RESET, LoopResult, RequestLoop
from lbconform.traffic.timeline import Timeline

Action = Callable[[Timeline], None]
#: Failures listed one by one in a description; the rest are counted.
LISTED_FAILURES = 10


@dataclass
class Disruption:
    result: LoopResult
    timeline: Timeline
    wire_resets: int | None
    wire_note: str = ""

    @property
    def socket_resets(self) -> int:
        return self.result.outcomes[RESET]

    def attributed(self) -> list[str]:
        """Each failure with its time since the start and the last thing that happened before it."""
        events = sorted(self.timeline.events, key=lambda e: e.at)
        out = []
        for f in self.result.failures:
            before = [e for e in events if e.at <= f.at]
            cause = f"after {before[-1].name} {before[-1].detail}".rstrip() if before else "before any event"
            out.append(f"+{f.at - self.timeline.start:.2f}s {f.kind} ({f.detail}) {cause}")
        return out

    def describe(self) -> str:
        r = self.result
        lines = [f"{r.sent} requests, {r.failed} failed {r.failure_kinds() or ''}".rstrip(),
                 f"resets: {self.socket_resets} on the socket, "
                 f"{'not measured' if self.wire_resets is None else self.wire_resets} on the wire"]
        failures = self.attributed()
        lines += failures[:LISTED_FAILURES]
        if len(failures) > LISTED_FAILURES:
            lines.append(f"... and {len(failures) - LISTED_FAILURES} more")
        return "\n".join(lines)


def through(client: Client, host: str, port: int, rate: float, action: Action, *, settle: float,
            timeout: float, variant: str = NEW_CONNECTION) -> Disruption:
    """Requests at ``rate`` from before ``action`` until ``settle`` seconds after it returned."""
    timeline = Timeline(time.time())
    reason = capture_available()
    capture = None if reason else ResetCapture(client.netns, ports=(port,))
    loop = RequestLoop(host, port, client.netns, variant=variant, timeout=timeout,
                       on_outcome=timeline.outcome)
    if capture is not None:
        capture.start()
    try:
        loop.start(rate)
        try:
            action(timeline)
            # The settle time is part of the measurement: terminations end after the rollout.
            time.sleep(settle)
        finally:
            result = loop.stop()
    finally:
        events = capture.stop() if capture is not None else []
    wire = None if capture is None else from_server(events, host, port)
    return Disruption(result, timeline, wire, reason or "")
