"""Pure logic of the termination ordering, pool-lag percentiles and idle-timeout bisection."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lbconform.convergence import follow, percentile
from lbconform.idle import IdleProbe, measure_idle_timeout
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
    low, high = measure_idle_timeout(cast(IdleProbe, cast(Any, probe)), 12.0)
    assert low <= actual <= high and high - low <= 2.0
    assert probe.probed[:2] == [6.0, 18.0]


def test_bisection_reports_a_timeout_outside_the_bounds() -> None:
    assert measure_idle_timeout(cast(IdleProbe, cast(Any, FakeProbe(5.0))), 12.0) == (0.0, 6.0)
    assert measure_idle_timeout(cast(IdleProbe, cast(Any, FakeProbe(100.0))), 12.0) == (18.0, float("inf"))
