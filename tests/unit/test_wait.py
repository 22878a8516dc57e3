"""The wait helpers, on a fake clock: deadlines, last value and error, convergence."""

from __future__ import annotations

import pytest

from lbconform.kube.rawapi import ApiError
from lbconform.wait import Bound, LbWaitTimeout, NotYet, WaitTimeout, await_convergence, poll_until


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_returns_the_first_truthy_value() -> None:
    clock = FakeClock()
    values = iter([None, 0, "found"])
    assert poll_until(lambda: next(values), timeout=10, description="x", interval=1,
                      clock=clock, sleep=clock.sleep) == "found"
    assert clock.sleeps == [1, 1]


def test_timeout_says_what_how_long_and_what_was_seen() -> None:
    clock = FakeClock()
    calls = iter([ValueError("boom"), None] * 100)

    def probe() -> object:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    with pytest.raises(WaitTimeout) as err:
        poll_until(probe, timeout=3, description="the thing", interval=1, clock=clock, sleep=clock.sleep)
    msg = str(err.value)
    assert "timed out after 3s waiting for the thing" in msg
    assert "last error: ValueError: boom" in msg
    assert clock.now == pytest.approx(103)


def test_never_sleeps_past_the_deadline() -> None:
    clock = FakeClock()
    with pytest.raises(WaitTimeout):
        poll_until(lambda: False, timeout=2.5, description="x", interval=1, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1, 1, 0.5]


def test_convergence_needs_consecutive_successes() -> None:
    clock = FakeClock()
    answers = iter([True, True, False, True, True, True])
    await_convergence(lambda: next(answers), successes=3, timeout=100, description="x",
                      interval=1, clock=clock, sleep=clock.sleep)
    assert len(clock.sleeps) == 5


def test_convergence_times_out_on_flapping() -> None:
    clock = FakeClock()
    flip = iter([True, False] * 50)
    with pytest.raises(WaitTimeout, match=r"\(2 in a row\)"):
        await_convergence(lambda: next(flip), successes=2, timeout=10, description="flappy",
                          interval=1, clock=clock, sleep=clock.sleep)


def test_a_timeout_says_what_a_not_yet_saw() -> None:
    clock = FakeClock()
    with pytest.raises(WaitTimeout) as err:
        poll_until(lambda: NotYet(["198.19.0.11", "198.19.0.12"]), timeout=1, interval=0.5,
                   description="the healthy set", clock=clock, sleep=clock.sleep)
    assert "last seen: ['198.19.0.11', '198.19.0.12']" in str(err.value)


def test_a_wait_for_the_lb_that_ran_out_is_an_assertion_and_one_for_the_cluster_is_not() -> None:
    clock = FakeClock()
    with pytest.raises(LbWaitTimeout) as lb:
        poll_until(lambda: NotYet(["b"]), timeout=2, description="the LB's healthy set", interval=1,
                   clock=clock, sleep=clock.sleep, timeout_error=LbWaitTimeout)
    assert isinstance(lb.value, AssertionError) and "last seen: ['b']" in str(lb.value)
    with pytest.raises(WaitTimeout) as cluster:
        poll_until(lambda: None, timeout=2, description="pods", interval=1, clock=clock, sleep=clock.sleep)
    assert not isinstance(cluster.value, AssertionError)


def test_a_wait_for_the_lb_whose_last_look_broke_on_the_cluster_api_is_no_verdict() -> None:
    clock = FakeClock()

    def api_down() -> object:
        raise ApiError(503, "ServiceUnavailable", "apiserver is shutting down")

    with pytest.raises(WaitTimeout) as broke:
        poll_until(api_down, timeout=2, description="an ingress address", interval=1, clock=clock,
                   sleep=clock.sleep, timeout_error=LbWaitTimeout)
    assert type(broke.value) is WaitTimeout and "ServiceUnavailable" in str(broke.value)
    # A connection to the VIP that fails is the LB's doing: the wait stays the LB's.
    def refused() -> object:
        raise ConnectionRefusedError("VIP:80")

    with pytest.raises(LbWaitTimeout):
        poll_until(refused, timeout=2, description="backends through the VIP", interval=1, clock=clock,
                   sleep=clock.sleep, retry_on=(OSError,), timeout_error=LbWaitTimeout)


def test_a_bound_says_what_it_allowed_for() -> None:
    bound = Bound((("declared time to unhealthy", 4.0), ("one check interval", 2.0), ("the poll", 0.1)))
    assert bound.total == pytest.approx(6.1)
    assert str(bound) == "6.1s = declared time to unhealthy 4s + one check interval 2s + the poll 0.1s"


def test_a_provider_that_cannot_observe_ends_the_wait_at_once() -> None:
    """NotSupported is a final answer: a wait that retries every other error does not retry it (a
    health-check wait on a provider that cannot read pools reports not supported, not a timeout)."""
    from lbconform.providers.base import NotSupported

    clock = FakeClock()
    calls: list[int] = []

    def probe() -> object:
        calls.append(1)
        raise NotSupported("cannot read backend pools")

    with pytest.raises(NotSupported, match="cannot read backend pools"):
        poll_until(probe, timeout=10, description="x", interval=1, clock=clock, sleep=clock.sleep)
    assert calls == [1] and clock.sleeps == []
