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

from lbconform.wait import FinalAnswer, LbWaitTimeout, WaitTimeout, poll_until

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


class _Overdue(FinalAnswer):
    """A change of the ready set that the pool has not shown within the lag allowed."""


def follow(change: Callable[[], object], ready: Callable[[], set[str]], pool: Callable[[], set[str]],
           want_ready: int, *, settle: float, lag: float, description: str) -> Lags:
    """Look at both sides, make the ``change``, then observe until ``want_ready`` addresses are
    ready and the pool equals them; time each change of the ready set until the pool showed it.

    The two sides have bounds of their own. The cluster has ``settle`` seconds to bring the ready
    set to ``want_ready`` (pods start, or their endpoints go): past them the wait is a plain
    WaitTimeout, not the LB's doing. The pool has ``lag`` seconds from the look that first saw each
    change of the ready set: an address it has not added or dropped by then ends the wait at once
    with an LbWaitTimeout that names it, however long the cluster itself took."""
    start_ready, start_pool = ready(), pool()
    change()
    ready_since: dict[str, float] = {}
    gone_since: dict[str, float] = {}
    lags = Lags()
    last: dict[str, object] = {}
    reached = [False]

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
        late = {"not added": sorted(ip for ip in r - p if now - ready_since.get(ip, now) > lag),
                "not dropped": sorted(ip for ip in p - r if now - gone_since.get(ip, now) > lag)}
        if any(late.values()):
            last.update({k: v for k, v in late.items() if v})
            raise _Overdue
        reached[0] = len(r) == want_ready
        return reached[0] and r == p

    try:
        poll_until(look, timeout=settle + lag, interval=INTERVAL, description=description,
                   timeout_error=LbWaitTimeout)
    except _Overdue:
        raise LbWaitTimeout(f"{description} (each change within {lag:g}s of the endpoints')", lag,
                            last, None) from None
    except WaitTimeout as exc:
        # The ready set never reached its target: the cluster's doing, not a verdict on the LB.
        error = LbWaitTimeout if reached[0] else WaitTimeout
        raise error(exc.description, exc.timeout, last, exc.last_error) from None
    return lags
