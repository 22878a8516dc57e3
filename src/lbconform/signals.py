"""SIGINT and SIGTERM during work that must be undone when it stops half-way, such as a lab's boot.

Inside ``stoppable()`` the first of either signal raises ``Stopped`` in the main thread, where the
work is, so that the work's own cleanup (an ``except BaseException`` that removes what was made)
runs, whatever the signal's disposition was before (a job a non-interactive shell starts in the
background inherits SIGINT ignored, and a terminal's Ctrl-C would then go unheard). Later signals
are ignored until the block is left: the cleanup is not cut short. A step whose effect and its
record must not be parted (a process started, then written down so that a cleanup finds it) runs
``held()``: a signal that comes during it raises once it is over.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Stopped", "held", "stoppable"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A signal stopped the work (a BaseException, as KeyboardInterrupt: no ``except Exception``
    swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """What a shell reports for a command the signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class _State(threading.local):
    def __init__(self) -> None:
        self.armed = False
        self.fired = False
        self.holding = 0
        self.pending: int | None = None


_state = _State()


def _handle(signum: int, _frame: FrameType | None) -> None:
    if not _state.armed or _state.fired:
        return
    if _state.holding:
        _state.pending = signum
        return
    _state.fired = True
    raise Stopped(signum)


@contextmanager
def stoppable() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Stopped`` (once) inside the block; outside the main thread, where
    no handler can be set, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or _state.armed:
        yield
        return
    previous = {sig: signal.signal(sig, _handle) for sig in SIGNALS}
    _state.armed, _state.fired, _state.pending = True, False, None
    try:
        yield
    finally:
        _state.armed = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def held() -> Iterator[None]:
    """A signal that comes inside the block raises ``Stopped`` when the block ends, not inside it."""
    _state.holding += 1
    try:
        yield
    except BaseException:
        # The work stops on this exception already: the signal is spent, the cleanup not cut.
        _state.holding -= 1
        if not _state.holding and _state.pending is not None:
            _state.pending, _state.fired = None, True
        raise
    _state.holding -= 1
    if not _state.holding and _state.pending is not None and not _state.fired:
        signum, _state.pending = _state.pending, None
        _state.fired = True
        raise Stopped(signum)
