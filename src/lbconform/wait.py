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


@dataclass(frozen=True)
class NotYet:
    """A probe's "not yet" that carries what it saw, so that a timeout says it (a probe
    that only answers ``False`` leaves the reader with "last seen: False")."""

    seen: object

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return repr(self.seen)


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


def poll_until(
    probe: Callable[[], T | NotYet | None],
    *,
    timeout: float,
    description: str,
    interval: float = 0.2,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """Call ``probe`` until it returns a truthy value, and return that value.

    Exceptions listed in ``retry_on`` count as "not yet" and are kept as the last error.
    The probe always runs at least once, even with a zero timeout.
    """
    deadline = Deadline.after(timeout, clock)
    last_value: object = None
    last_error: BaseException | None = None
    with waiting(description, timeout):
        while True:
            try:
                value = probe()
            except retry_on as exc:
                last_error = exc
            else:
                if value and not isinstance(value, NotYet):
                    return value
                last_value = value
            if deadline.expired():
                raise WaitTimeout(description, timeout, last_value, last_error)
            sleep(min(interval, deadline.remaining()))


def await_convergence(
    probe: Callable[[], bool],
    *,
    successes: int,
    timeout: float,
    description: str,
    interval: float = 0.2,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
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
        interval=interval, clock=clock, sleep=sleep,
    )
