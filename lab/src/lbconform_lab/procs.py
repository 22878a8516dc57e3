"""Starting the lab's long-lived processes, and ending exactly those, by pid.

A process is started detached (its own session, output to a log file) inside a network
namespace through ``nsenter``, which execs in place so the pid we record is the program's
own. A pid is only ever signalled when its start time still matches the one
recorded, so a reused pid is never hit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from lbconform.nsexec import in_netns
from lbconform.wait import WaitTimeout, poll_until
from lbconform_lab.state import Process

log = logging.getLogger(__name__)

#: A SIGKILLed process is gone within milliseconds; this only bounds a stuck exit.
SIGKILL_EXIT_SECONDS = 2.0


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so split after its ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])



def spawn(
    name: str,
    argv: Sequence[str],
    *,
    netns: str | None,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Process:
    """Start a detached process and return its record."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            in_netns(netns, argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=dict(env) if env is not None else None, cwd=cwd,
            close_fds=True,
        )
    ticks = start_ticks(proc.pid) or 0
    log.debug("started %s pid %d: %s", name, proc.pid, " ".join(argv))
    return Process(name=name, pid=proc.pid, start_ticks=ticks, netns=netns, log=str(log_path))


def alive(proc: Process) -> bool:
    ticks = start_ticks(proc.pid)
    if ticks is None or ticks != proc.start_ticks:
        return False
    # A zombie has exited; it only waits for its parent to reap it.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def signal_process(proc: Process, sig: int) -> bool:
    """Signal the recorded process if it is still the one we started."""
    if not alive(proc):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
        return True
    return False


def stop(procs: Sequence[Process], grace: float = 5.0) -> None:
    """SIGTERM the processes, then SIGKILL whatever still runs after ``grace`` seconds."""
    live = [p for p in procs if signal_process(p, signal.SIGTERM)]

    def all_gone() -> bool:
        return not any(alive(p) for p in live)

    with contextlib.suppress(WaitTimeout):
        poll_until(all_gone, timeout=grace, interval=0.05, description="processes to exit on SIGTERM")
    for p in live:
        if signal_process(p, signal.SIGKILL):
            log.debug("%s (pid %d) ignored SIGTERM, killed", p.name, p.pid)
    with contextlib.suppress(WaitTimeout):
        poll_until(all_gone, timeout=SIGKILL_EXIT_SECONDS, interval=0.02,
                   description="processes to exit on SIGKILL")
