"""Work stopped by a signal: the first SIGINT or SIGTERM raises ``Stopped`` where the work is, a step
held is never cut, and the cleanup that follows is not cut short by another signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lbconform.signals import Stopped, held, stoppable


def send(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_raises_stopped_with_the_shells_exit_code(sig: signal.Signals, code: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Stopped) as stopped, stoppable():
        send(sig)
        for _ in range(1000):  # the handler runs between two bytecodes of the main thread
            pass
        raise AssertionError("the signal did not stop the work")
    assert stopped.value.signum == sig and stopped.value.exit_code == code
    assert signal.getsignal(sig) is before


def test_a_held_step_ends_before_the_signal_raises() -> None:
    steps = []
    with pytest.raises(Stopped), stoppable():
        with held():
            send(signal.SIGTERM)
            steps.append("made")
            steps.append("recorded")
        steps.append("next step")
    assert steps == ["made", "recorded"]


def test_the_cleanup_after_the_first_signal_is_not_cut_by_a_second() -> None:
    cleaned = []
    with pytest.raises(Stopped), stoppable():
        try:
            send(signal.SIGINT)
            for _ in range(1000):
                pass
        except BaseException:
            send(signal.SIGINT)
            send(signal.SIGTERM)
            with held():
                pass
            cleaned.append("all of it")
            raise
    assert cleaned == ["all of it"]


def test_a_signal_ignored_before_is_heard_inside() -> None:
    """A job a non-interactive shell starts in the background inherits SIGINT ignored."""
    code = ("import os, signal, sys\n"
            "from lbconform.signals import Stopped, stoppable\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "try:\n"
            "    with stoppable():\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        for _ in range(1000): pass\n"
            "except Stopped as exc:\n"
            "    sys.exit(exc.exit_code)\n")
    done = subprocess.run([sys.executable, "-c", code], timeout=120, check=False)
    assert done.returncode == 130
