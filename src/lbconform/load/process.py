"""One Locust process that this harness started, and how it ends: by its pid, never by name.

Locust patches the standard library with gevent when it is imported; inside pytest that
breaks ssl and hangs pytest-xdist. So Locust never runs in the calling process: it is
``python -m locust`` from the harness's own environment, in a network namespace when asked
(through ``nsenter``, which execs in place so the pid we hold is Locust's own, as
``lbconform_lab.procs`` does for the lab). Its output goes to a log file, whose tail is what
an error shows. Stopping sends SIGTERM (Locust then writes its statistics) and SIGKILL after
a grace period, to this pid only: Locust starts no children of its own (``--processes`` is
never used), and local workers are processes of their own, stopped the same way.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from lbconform.errors import LoadError
from lbconform.logs import log_tail
from lbconform.nsexec import in_netns
from lbconform.wait import WaitTimeout, poll_until

log = logging.getLogger(__name__)

#: SIGTERM makes Locust stop its users, write its statistics and exit, which takes well
#: under a second; a master also tells its workers to quit. Past this, SIGKILL.
STOP_GRACE_SECONDS = 10.0
#: A SIGKILLed process is gone within milliseconds; this only bounds a stuck exit.
KILL_EXIT_SECONDS = 5.0

__all__ = ["KILL_EXIT_SECONDS", "STOP_GRACE_SECONDS", "LocustProcess", "locust_command"]


def locust_command() -> list[str]:
    """How this environment runs Locust, or a LoadError that says how to get it."""
    if importlib.util.find_spec("locust") is None:
        raise LoadError(f"locust is not installed in {sys.prefix}: pip install 'locust==2.47.0'")
    return [sys.executable, "-m", "locust"]


class LocustProcess:
    """A started Locust process: ``wait``, ``stop``, and the tail of its log."""

    def __init__(self, name: str, args: Sequence[str], *, log_path: Path, netns: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.argv = in_netns(netns, [*locust_command(), *args])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **(env or {})}
        with open(log_path, "ab") as out:
            try:
                self.proc = subprocess.Popen(
                    self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=full_env, cwd=cwd, close_fds=True,
                )
            except OSError as exc:
                raise LoadError(f"cannot start {name} ({self.argv[0]}): {exc}") from None
        self.pid = self.proc.pid
        log.info("started %s (pid %d): %s", name, self.pid, " ".join(self.argv))

    def running(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def tail(self, lines: int = 5) -> str:
        return log_tail(self.log_path, lines)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it still runs after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code (None if it would not die)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            if self.wait(grace) is None:
                log.warning("%s (pid %d) ignored SIGTERM for %gs, killing it", self.name, self.pid, grace)
                self.proc.kill()
                try:
                    poll_until(lambda: self.proc.poll() is not None, timeout=KILL_EXIT_SECONDS,
                               interval=0.05, description=f"{self.name} (pid {self.pid}) to exit on SIGKILL")
                except WaitTimeout:
                    log.error("%s (pid %d) survived SIGKILL", self.name, self.pid)
        return self.proc.poll()
