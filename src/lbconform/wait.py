"""The one way the harness waits: a monotonic deadline, an interval and a description.

A wait that times out says what it awaited, for how long, the last value it saw and the
last error it met, so that a failed wait explains itself. The clock and the sleep are
injectable, which is how the waits themselves are unit-tested.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lbconform.errors import LbconformError
from lbconform.progress import waiting

T = TypeVar("T")

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class WaitTimeout(LbconformError):
    """A wait ran out of time; the message carries what was awaited and what was seen."""

    def __init__(
        self, description: str, timeout: float, last_value: object, last_error: BaseException | None
    ) -> None:
        self.description = description
        self.timeout = timeout
        self.last_value = last_value
        self.last_error = last_error
        parts = [f"timed out after {timeout:g}s waiting for {description}"]
        if last_value is not None:
            parts.append(f"last seen: {last_value!r}")
        if last_error is not None:
            parts.append(f"last error: {type(last_error).__name__}: {last_error}")
        super().__init__("; ".join(parts))


class LbWaitTimeout(WaitTimeout, AssertionError):
    """A wait for the load balancer's own behaviour ran out (an address, a healthy set, traffic
    that converges): the implementation did not do in time what it must. It is an assertion, so
    the test *fails*; a wait for the cluster (pods, endpoints, deletion) that runs out is a plain
    WaitTimeout, and the test is an *error*: not the LB's fault, not a conformance verdict."""


@dataclass(frozen=True)
class NotYet:
    """A probe's "not yet" that carries what it saw, so that a timeout says it (a probe
    that only answers ``False`` leaves the reader with "last seen: False")."""

    seen: object

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return repr(self.seen)


@dataclass(frozen=True)
class Bound:
    """An upper bound on a duration, made of named parts, so that an assertion against it says
    what it allowed for: ``6.1s = declared time to unhealthy 4s + one check interval 2s + ...``."""

    parts: tuple[tuple[str, float], ...]

    @property
    def total(self) -> float:
        return sum(seconds for _, seconds in self.parts)

    def __str__(self) -> str:
        return f"{self.total:g}s = " + " + ".join(f"{name} {seconds:g}s" for name, seconds in self.parts)


@dataclass
class Deadline:
    """A point on the monotonic clock."""

    at: float
    clock: Clock = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Clock = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.at


class FinalAnswer(Exception):
    """An answer no wait retries: raised by a probe, it ends the wait at once, whatever
    ``retry_on`` says (a provider that cannot observe what is awaited will not later)."""


def poll_until(
    probe: Callable[[], T | NotYet | None],
    *,
    timeout: float,
    description: str,
    interval: float = 0.2,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    timeout_error: type[WaitTimeout] = WaitTimeout,
) -> T:
    """Call ``probe`` until it returns a truthy value, and return that value.

    Exceptions listed in ``retry_on`` count as "not yet" and are kept as the last error, except
    ``FinalAnswer`` ones, which end the wait at once.
    The probe always runs at least once, even with a zero timeout. Running out raises
    ``timeout_error``: LbWaitTimeout where what is awaited is the load balancer's doing.
    """
    deadline = Deadline.after(timeout, clock)
    last_value: object = None
    last_error: BaseException | None = None
    broke = False
    with waiting(description, timeout):
        while True:
            try:
                value = probe()
            except FinalAnswer:
                raise
            except retry_on as exc:
                last_error, broke = exc, True
            else:
                if value and not isinstance(value, NotYet):
                    return value
                last_value, broke = value, False
            if deadline.expired():
                # A wait for the LB whose last look broke on the cluster's API saw nothing of the LB.
                error = WaitTimeout if broke and cluster_broke(last_error) else timeout_error
                raise error(description, timeout, last_value, last_error)
            sleep(min(interval, deadline.remaining()))


def cluster_broke(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the cluster's API failing or out of reach (not something the LB did)."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    from lbconform.kube.rawapi import ApiError

    return isinstance(exc, ApiError | ApiException | urllib3.exceptions.HTTPError)


def await_convergence(
    probe: Callable[[], bool],
    *,
    successes: int,
    timeout: float,
    description: str,
    interval: float = 0.2,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    timeout_error: type[WaitTimeout] = WaitTimeout,
) -> None:
    """Wait until ``probe`` holds ``successes`` times in a row: one lucky answer is not enough."""
    streak = 0

    def step() -> bool:
        nonlocal streak
        try:
            ok = probe()
        except Exception:
            streak = 0
            raise
        streak = streak + 1 if ok else 0
        return streak >= successes

    poll_until(
        step, timeout=timeout, description=f"{description} ({successes} in a row)",
        interval=interval, clock=clock, sleep=sleep, timeout_error=timeout_error,
    )
