"""Pure logic of the termination ordering, pool-lag percentiles and idle-timeout bisection."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from lbconform.convergence import follow, percentile
from lbconform.idle import CannotObserve, ChangeTooSlow, IdleProbe, measure_idle_timeout, plan_idle_check
from lbconform.providers.base import Declared
from lbconform.termination import Ordering
from lbconform.traffic.fleet import ALIVE, RESET
from lbconform.wait import LbWaitTimeout, WaitTimeout

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
    lags = follow(lambda: None, lambda: next(ready_seq), lambda: next(pool_seq), 2, settle=5, lag=1,
                  description="test")
    assert set(lags.added) == {"b"} and 0.05 <= lags.added["b"] <= 0.5 and lags.removed == {}


def test_follow_gives_the_cluster_its_own_time_and_the_pool_only_its_lag() -> None:
    """Endpoints that take longer than the lag to change are the cluster's time, not the LB's; a
    pool that has not shown a change within the lag of it is the LB's failure, named, at once."""
    slow_endpoints = iter([{"a"}] * 8 + [{"a", "b"}] * 10)
    pool_follows = iter([{"a"}] * 9 + [{"a", "b"}] * 9)
    lags = follow(lambda: None, lambda: next(slow_endpoints), lambda: next(pool_follows), 2, settle=5,
                  lag=0.3, description="test")
    assert set(lags.added) == {"b"} and lags.added["b"] <= 0.3

    stale = iter([{"a", "b"}] + [{"a"}] * 50)
    start = time.monotonic()
    with pytest.raises(LbWaitTimeout, match=r"not dropped.*'b'"):
        follow(lambda: None, lambda: next(stale), lambda: {"a", "b"}, 1, settle=5, lag=0.3,
               description="test")
    assert time.monotonic() - start < 2


def test_follow_whose_endpoints_never_settle_is_the_clusters_timeout_not_the_lbs() -> None:
    with pytest.raises(WaitTimeout) as caught:
        follow(lambda: None, lambda: {"a"}, lambda: {"a"}, 2, settle=0.3, lag=0.2, description="test")
    assert not isinstance(caught.value, LbWaitTimeout)


class FakeProbe:
    """Flows forgotten after ``timeout`` seconds; a change then resets some of them. A change takes
    ``change_seconds``: one that ends after the asked idle time stretches it, as IdleProbe's do."""

    connections = 30

    def __init__(self, timeout: float, change_seconds: float = 0.0) -> None:
        self.timeout, self.change_seconds = timeout, change_seconds
        self.probed: list[float] = []
        self.idled = 0.0

    def idle(self, seconds: float, *, change: bool, within: float | None = None) -> dict[str, int]:
        if change and self.change_seconds > max(seconds, within or seconds):
            raise ChangeTooSlow(f"{self.change_seconds} > {within}")
        self.idled = max(seconds, self.change_seconds if change else 0.0)
        self.probed.append(self.idled)
        return {ALIVE: 30} if self.idled < self.timeout or not change else {ALIVE: 12, RESET: 18}


def measure(probe: FakeProbe, declared: float = 12.0, **kwargs: float) -> tuple[float, float]:
    return measure_idle_timeout(cast(IdleProbe, cast(Any, probe)), declared, 900, **kwargs)


def test_the_bracket_around_the_declared_timeout_is_probed_first_and_is_enough_when_it_holds() -> None:
    probe = FakeProbe(12.0)
    assert measure(probe) == (11.0, 13.0)
    assert probe.probed == [11.0, 13.0]


@pytest.mark.parametrize("actual", [9.5, 7.0, 13.5])
def test_a_timeout_outside_the_bracket_is_searched_to_within_the_resolution(actual: float) -> None:
    probe = FakeProbe(actual)
    low, high = measure(probe)
    assert low <= actual <= high and high - low <= 2.0


@pytest.mark.parametrize("actual", [12.0, 9.5])
def test_a_change_slower_than_the_idle_asked_stretches_the_idle_time_it_measures(actual: float) -> None:
    probe = FakeProbe(actual, change_seconds=7.5)
    low, high = measure(probe)
    assert low <= actual <= high and high - low <= 2.0
    assert min(probe.probed) == 7.5 if actual < 11 else probe.probed == [11.0, 13.0]


def test_a_short_timeout_is_caught_though_the_change_is_slow() -> None:
    assert measure(FakeProbe(5.0, change_seconds=7.5)) == (0.0, 7.5)


def test_a_change_too_slow_to_tell_the_timeout_is_an_error_not_a_measurement() -> None:
    # Past the declared value, a reset at the bracket's low end would say nothing about the timeout.
    with pytest.raises(ChangeTooSlow):
        measure(FakeProbe(12.0, change_seconds=12.5))
    assert measure(FakeProbe(12.0, change_seconds=11.9)) == (11.9, 13.0)
    # While searching, every probe still narrows the bracket: the bisection ends.
    probe = FakeProbe(8.0, change_seconds=7.9)
    low, high = measure(probe)
    assert low <= 8.0 <= high and high - low <= 2.0


def test_a_timeout_outside_the_search_is_reported_as_below_or_above_it() -> None:
    assert measure(FakeProbe(5.0)) == (0.0, 6.0)
    assert measure(FakeProbe(100.0)) == (18.0, float("inf"))


def test_a_timeout_of_a_minute_or_more_is_bracketed_not_searched() -> None:
    plan = plan_idle_check(240.0, 900)
    assert (plan.search, plan.low, plan.high) == (False, 228.0, 252.0)
    probe = FakeProbe(240.0)
    assert measure(probe, 240.0) == (228.0, 252.0)
    assert probe.probed == [228.0, 252.0]
    early = FakeProbe(200.0)
    assert measure(early, 240.0) == (0.0, 228.0) and early.probed == [228.0]
    late = FakeProbe(300.0)
    assert measure(late, 240.0) == (252.0, float("inf")) and late.probed == [228.0, 252.0]
    minute = plan_idle_check(60.0, 900)
    assert (minute.search, minute.low, minute.high, minute.low_at_most) == (False, 57.0, 63.0, 58.0)
    assert plan_idle_check(59.0, 900).search


def test_below_the_timeout_may_stretch_to_the_resolution_short_of_it_never_below_the_bracket() -> None:
    assert plan_idle_check(10.0, 900).low_at_most == 9.0
    assert plan_idle_check(240.0, 900).low_at_most == 238.0


def test_a_timeout_the_budget_cannot_hold_is_refused() -> None:
    with pytest.raises(CannotObserve, match="idles at least 480s: raise --timeout idle_probe above that"):
        plan_idle_check(240.0, 300)
    assert plan_idle_check(350.0, 900).least_idle_seconds == 700.0
