"""The lab tests that boot a lab of their own, run in a pytest of their own on a second lab.

MetalLB's certification and kube-vip's test boot their own labs and need nothing of the
session's. With ``--own-labs-beside`` (``make test``) the session leaves them out and runs them
in a second pytest on lab instance ``INSTANCE`` (``$LBCONFORM_LAB_INSTANCE``: its own namespaces,
directory and apiserver port), started once the reference runs have ended. The reference phase
keeps both cores busy; what comes after it waits on timers (chaos experiments, grace periods),
and so do these certifications, so the two share the machine without slowing each other much.

The session's last test waits for it before the session's fixtures end, so that the session's lab
is up from its start to its end (they compare what their lab leaves with the machine as they found
it). Its output is printed when the session ends, and its failure fails the session.
It has a process group of its own, so that an interrupted session gives it exactly one SIGINT,
after which it takes its lab down as any interrupted session does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from lbconform_lab.topology import INSTANCE_ENV

MARKER = "own_lab"
OPTION = "--own-labs-beside"
#: The lab instance the second pytest works with.
INSTANCE = "2"
#: An interrupted second pytest takes its lab down within this (a boot ends within 30 s).
INTERRUPT_SECONDS = 120.0
#: The session waits this long at most for the second pytest to end (its own runs took 13 to 16
#: minutes here); past it, the second pytest is interrupted and fails the session.
WAIT_SECONDS = 40 * 60.0


class Beside:
    """The second pytest: the node ids it runs, its process and its output."""

    def __init__(self, nodeids: list[str], rootdir: Path) -> None:
        self.nodeids = nodeids
        self.rootdir = rootdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    @property
    def started(self) -> bool:
        return self.proc is not None

    def start(self) -> None:
        """Starts it, once; nothing to run is nothing started."""
        if self.proc is not None or not self.nodeids:
            return
        argv = [sys.executable, "-m", "pytest", *self.nodeids, "-p", "no:cacheprovider", "--durations=10"]
        self.log = Path(tempfile.mkstemp(prefix="lbconform-beside-", suffix=".log")[1])
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=self.rootdir, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, INSTANCE_ENV: INSTANCE},
                                         start_new_session=True)

    def wait(self) -> None:
        """Waits for it to end (started now if it was not: the session had nothing after the
        runs), at most WAIT_SECONDS: then it is interrupted, and its exit status says so."""
        self.start()
        if self.proc is None:
            return
        try:
            self.proc.wait(WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"\nthe tests beside ran past {WAIT_SECONDS:g}s: interrupting them", file=sys.stderr,
                  flush=True)
            self._interrupt()

    def finish(self, interrupted: bool) -> tuple[int | None, str]:
        """Its exit status and output, once it has ended; an interrupted session interrupts it."""
        if not interrupted:
            self.wait()
        elif self.proc is not None and self.proc.poll() is None:
            self._interrupt()
        if self.proc is None or self.log is None:
            return None, ""
        rc = self.proc.wait()
        output = self.log.read_text(errors="replace")
        self.log.unlink(missing_ok=True)
        return rc, output

    def _interrupt(self) -> None:
        """One SIGINT, as a Ctrl-C would give it (a second would cut its lab's teardown short)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(INTERRUPT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
