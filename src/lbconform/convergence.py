"""How far an LB's pool lags behind the ready endpoints: each change timed, then summarised.

The observer looks at both sides in one loop: the EndpointSlices (what the implementation
follows) and the pool the implementation reports. An address's lag is the time from the
loop that first saw it ready (or no longer ready) to the loop that first saw the pool add
(or drop) it; the loop's interval is the measurement's resolution.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.wait import LbWaitTimeout, WaitTimeout, poll_until

#: Seconds between two looks at the endpoints and the pool.
INTERVAL = 0.1


@dataclass
class Lags:
    added: dict[str, float] = field(default_factory=dict)
    removed: dict[str, float] = field(default_factory=dict)

    def all(self) -> list[float]:
        return [*self.added.values(), *self.removed.values()]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def follow(change: Callable[[], object], ready: Callable[[], set[str]], pool: Callable[[], set[str]],
           want_ready: int, timeout: float, description: str) -> Lags:
    """Look at both sides, make the ``change``, then observe until ``want_ready`` addresses are
    ready and the pool equals them; time each change of the ready set until the pool showed it."""
    start_ready, start_pool = ready(), pool()
    change()
    ready_since: dict[str, float] = {}
    gone_since: dict[str, float] = {}
    lags = Lags()
    last: dict[str, object] = {}

    def look() -> bool:
        now = time.monotonic()
        r, p = ready(), pool()
        for ip in r - start_ready:
            ready_since.setdefault(ip, now)
        for ip in start_ready - r:
            gone_since.setdefault(ip, now)
        for ip in p - start_pool:
            if ip in ready_since:
                lags.added.setdefault(ip, now - ready_since[ip])
        for ip in start_pool - p:
            if ip in gone_since:
                lags.removed.setdefault(ip, now - gone_since[ip])
        last.update(ready=sorted(r), pool=sorted(p))
        return len(r) == want_ready and r == p

    try:
        poll_until(look, timeout=timeout, interval=INTERVAL, description=description,
                   timeout_error=LbWaitTimeout)
    except WaitTimeout as exc:
        raise type(exc)(exc.description, exc.timeout, last, exc.last_error) from None
    return lags
