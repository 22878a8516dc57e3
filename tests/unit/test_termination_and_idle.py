"""Pure logic of the termination ordering, pool-lag percentiles and idle-timeout bisection."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lbconform.convergence import follow, percentile
from lbconform.idle import CannotObserve, IdleProbe, measure_idle_timeout, plan_idle_check
from lbconform.providers.base import Declared
from lbconform.termination import Ordering
from lbconform.traffic.fleet import ALIVE, RESET

LAB = Declared(health_check_interval=2.0, healthy_threshold=2, unhealthy_threshold=2, idle_timeout=240.0)


def test_correct_ordering_holds_with_room() -> None:
    order = Ordering.correct(LAB)
    assert (order.u, order.p, order.g) == (4.0, 8, 18)
    assert order.broken() == [] and order.exposed() == 0.0
    assert order.at_least(p=10).p == 10 and order.at_least(p=10).g == 20


@pytest.mark.parametrize(("order", "named", "exposed"), [
    (Ordering(u=4, p=1, g=30, d=0), "p < u: preStop 1s is 3s shorter", 3.0),
    (Ordering(u=4, p=20, g=1, d=0), "g < p: grace period 1s cuts preStop 20s short by 19s", 3.0),
    (Ordering(u=4, p=None, g=30, d=0), "no preStop", 4.0),
])
def test_each_broken_inequality_is_named_with_its_size(order: Ordering, named: str, exposed: float) -> None:
    (broken,) = order.broken()
    assert broken.startswith(named)
    assert order.exposed() == exposed


def test_percentiles_are_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 21)]
    assert percentile(values, 50) == pytest.approx(1.0)
    assert percentile(values, 95) == pytest.approx(1.9)
    assert percentile(values, 100) == pytest.approx(2.0)


def test_follow_times_additions_and_removals() -> None:
    ready_seq = iter([{"a"}, {"a"}, {"a", "b"}, {"a", "b"}, {"a", "b"}])
    pool_seq = iter([{"a"}, {"a"}, {"a"}, {"a", "b"}, {"a", "b"}])
    lags = follow(lambda: None, lambda: next(ready_seq), lambda: next(pool_seq), 2, timeout=5,
                  description="test")
    assert set(lags.added) == {"b"} and 0.05 <= lags.added["b"] <= 0.5 and lags.removed == {}


class FakeProbe:
    """Flows forgotten after ``timeout`` seconds; a change then resets some of them."""

    connections = 30

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.probed: list[float] = []

    def idle(self, seconds: float, *, change: bool) -> dict[str, int]:
        self.probed.append(seconds)
        return {ALIVE: 30} if seconds < self.timeout or not change else {ALIVE: 12, RESET: 18}


@pytest.mark.parametrize("actual", [12.0, 9.5, 16.0])
def test_bisection_brackets_the_timeout_within_the_resolution(actual: float) -> None:
    probe = FakeProbe(actual)
    low, high = measure_idle_timeout(cast(IdleProbe, cast(Any, probe)), 12.0, 900)
    assert low <= actual <= high and high - low <= 2.0
    assert probe.probed[:2] == [6.0, 18.0]


def test_bisection_reports_a_timeout_outside_the_bounds() -> None:
    assert measure_idle_timeout(cast(IdleProbe, cast(Any, FakeProbe(5.0))), 12.0, 900) == (0.0, 6.0)
    assert measure_idle_timeout(cast(IdleProbe, cast(Any, FakeProbe(100.0))), 12.0, 900) == (
        18.0, float("inf"))


def test_a_minutes_long_timeout_is_bracketed_not_bisected() -> None:
    plan = plan_idle_check(240.0, 900, server_keepalive=3600)
    assert (plan.bisect, plan.low, plan.high) == (False, 228.0, 252.0)
    probe = FakeProbe(240.0)
    measured = measure_idle_timeout(cast(IdleProbe, cast(Any, probe)), 240.0, 900, server_keepalive=3600)
    assert measured == (228.0, 252.0)
    assert probe.probed == [228.0, 252.0]
    early = FakeProbe(200.0)
    measured = measure_idle_timeout(cast(IdleProbe, cast(Any, early)), 240.0, 900, server_keepalive=3600)
    assert measured == (0.0, 228.0) and early.probed == [228.0]


def test_a_timeout_the_backends_keepalive_hides_or_the_budget_cannot_hold_is_refused() -> None:
    with pytest.raises(CannotObserve, match="keepalive probes every connection idle 15s"):
        plan_idle_check(240.0, 900)
    with pytest.raises(CannotObserve, match="raise --timeout idle_probe above that"):
        plan_idle_check(240.0, 300, server_keepalive=3600)
    assert plan_idle_check(10.0, 900).bisect
