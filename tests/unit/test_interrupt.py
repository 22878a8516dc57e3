"""``lbconform run``'s interrupt handling with real child processes: the first signal reaches the
suites' process group as one SIGINT, the second kills the group. (The whole run, interrupted on
the lab, is tests/lab/test_interrupt.py.)"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

from lbconform.run import Interrupt

#: A child that counts the SIGINTs it gets, has a grandchild in its group that does the same,
#: and takes a second to "tear down" after the first. Each says it is ready once its handler is
#: set, in a file of its own.
CHILD = r"""
import os, signal, subprocess, sys, time
out = sys.argv[1]
def note(who):
    def handler(signum, frame):
        with open(out, "a") as f:
            f.write(who + "\n")
        if who == "child":
            time.sleep(1)
        sys.exit(2)
    return handler
if len(sys.argv) > 2:
    signal.signal(signal.SIGINT, note("grandchild"))
    with open(out + ".grandchild-ready", "w"):
        pass
    time.sleep(60)
    sys.exit(0)
signal.signal(signal.SIGINT, note("child"))
subprocess.Popen([sys.executable, __file__, out, "grandchild"])
with open(out + ".ready", "w"):
    pass
time.sleep(60)
"""


def start(tmp_path: Path, interrupt: Interrupt) -> tuple[threading.Thread, list[int], Path]:
    script, out = tmp_path / "child.py", tmp_path / "signals"
    script.write_text(CHILD)
    codes: list[int] = []
    argv = [sys.executable, str(script), str(out)]
    thread = threading.Thread(target=lambda: codes.append(interrupt.wait(argv)))
    thread.start()
    deadline = time.monotonic() + 10
    ready = [Path(f"{out}.ready"), Path(f"{out}.grandchild-ready")]
    while not all(p.exists() for p in ready):
        assert time.monotonic() < deadline, "the child and grandchild did not set their handlers within 10 s"
        time.sleep(0.05)
    return thread, codes, out


def test_the_first_signal_reaches_the_whole_group_once(tmp_path: Path) -> None:
    said: list[str] = []
    interrupt = Interrupt(said.append, "`lbconform sweep --run-id x` removes them")
    thread, codes, out = start(tmp_path, interrupt)
    interrupt._handle(signal.SIGTERM, None)
    thread.join(10)
    assert codes == [2] and interrupt.exit_code == 143 and not interrupt.killed
    assert sorted(out.read_text().split()) == ["child", "grandchild"]
    assert said and said[0].startswith("SIGTERM: ending the tests in flight")


def test_a_second_signal_kills_the_group_and_says_what_may_be_left(tmp_path: Path) -> None:
    said: list[str] = []
    interrupt = Interrupt(said.append, "`lbconform sweep --run-id x` removes them")
    thread, codes, _ = start(tmp_path, interrupt)
    interrupt._handle(signal.SIGINT, None)
    started = time.monotonic()
    interrupt._handle(signal.SIGINT, None)
    thread.join(10)
    assert codes == [-signal.SIGKILL] and time.monotonic() - started < 0.9
    assert interrupt.killed and interrupt.exit_code == 130
    assert "may be left: `lbconform sweep --run-id x` removes them" in said[-1]
