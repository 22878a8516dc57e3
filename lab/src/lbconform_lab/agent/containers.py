"""One container: its process, its state as the kubelet reports it, and how it is killed.

Killing follows the kubelet's ``killContainer`` to the letter, because the graceful-
termination suites measure exactly this ordering: run the preStop hook within the grace
period, subtract the whole seconds it took, give the process at least two more seconds
(the kubelet's ``minimumGracePeriodInSeconds``), send SIGTERM, and SIGKILL when that runs out.
A grace period shortened while the kill runs (a later delete with a smaller one, or a force
delete) cuts it, as the kubelet's pod workers do: the preStop hook ends, SIGTERM follows, and
SIGKILL comes by the shorter deadline (still at least the minimum after SIGTERM).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lbconform.nsexec import in_netns
from lbconform_lab.agent.images import Program
from lbconform_lab.agent.probes import ProbeTarget, ProbeWorker

log = logging.getLogger(__name__)

Json = Mapping[str, Any]

#: The kubelet never gives a container less than this after its preStop hook.
MINIMUM_GRACE_SECONDS = 2
#: How long a start waits for the container's root to be in place (its setup takes tens of ms).
ROOT_READY_SECONDS = 10.0
#: Restart back-off: the kubelet starts at 10 s and doubles to 5 min; the lab is faster
#: so that crash-looping test pods do not stall suites, with the same doubling.
BACKOFF_INITIAL_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 20.0
#: How often a kill in progress looks at its process and its deadline.
KILL_POLL_SECONDS = 0.05


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Container:
    """Runtime state of one container of one pod."""

    def __init__(self, spec: Json, program: Program | None, waiting_reason: str = "",
                 waiting_message: str = "", restart_count: int = 0) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.program = program
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = ""
        self.finished_at = ""
        self.exit_code: int | None = None
        self.exit_reason = ""
        self.restart_count = restart_count
        self.last_state: dict[str, Any] = {}
        self.waiting_reason = waiting_reason or "ContainerCreating"
        self.waiting_message = waiting_message
        self.next_start = 0.0
        self.backoff = BACKOFF_INITIAL_SECONDS
        self._started_mono = 0.0
        self.probes: dict[str, ProbeWorker] = {}
        self.killing = False
        self.lock = threading.Lock()
        #: This run's log and the run's before (``kubectl logs --previous``).
        self.log_path: Path | None = None
        self.previous_log: Path | None = None
        #: When a shortened grace period runs out (monotonic), once one was given.
        self._cut_at: float | None = None

    # --- state -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc is not None and self.exit_code is None

    @property
    def startup_done(self) -> bool:
        probe = self.probes.get("startup")
        return self.running and (probe is None or probe.result is True)

    @property
    def ready(self) -> bool:
        if not self.startup_done or (self.killing and not self.running):
            return False
        probe = self.probes.get("readiness")
        return probe is None or probe.result is True

    def status(self, image: str) -> dict[str, Any]:
        state: dict[str, Any]
        if self.running:
            state = {"running": {"startedAt": self.started_at}}
        elif self.exit_code is not None:
            state = {"terminated": {"exitCode": self.exit_code, "reason": self.exit_reason,
                                    "startedAt": self.started_at, "finishedAt": self.finished_at}}
        else:
            state = {"waiting": {"reason": self.waiting_reason,
                                 **({"message": self.waiting_message} if self.waiting_message else {})}}
        out: dict[str, Any] = {
            "name": self.name, "image": image,
            "imageID": self.program.image_id if self.program else "",
            "ready": self.ready, "started": self.startup_done, "restartCount": self.restart_count,
            "state": state, "lastState": self.last_state,
        }
        if self.proc is not None:
            out["containerID"] = f"lab://{self.proc.pid}"
        return out

    # --- lifecycle ---------------------------------------------------------------------
    def start(self, netns: str | None, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        """Start ``argv`` (the program wrapped in its root, ``rootfs.container_argv``) in the pod's
        network namespace; this run's output goes to ``log_path`` and the last run's stays.

        It returns once the root is in place, as a runtime's start returns once the container's
        process runs: an exec or a probe entering the container before would find the machine's
        root (its /etc/hostname). Its stdin is a pipe that the setup closes then (or that closes
        as it ends); ``ROOT_READY_SECONDS`` bounds the wait."""
        assert self.program is not None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_path is not None and self.log_path != log_path:
            self.previous_log = self.log_path
        self.log_path = log_path
        ready_r, ready_w = os.pipe()
        try:
            with open(log_path, "ab") as out:
                self.proc = subprocess.Popen(
                    in_netns(netns, argv), stdout=out, stderr=subprocess.STDOUT,
                    stdin=ready_w, env=dict(env), start_new_session=True, cwd="/",
                )
            os.close(ready_w)
            ready_w = -1
            # Nothing is written: readable means end of file, the setup's stdin closed.
            if not select.select([ready_r], [], [], ROOT_READY_SECONDS)[0]:
                log.warning("%s: root not in place after %ss", self.name, ROOT_READY_SECONDS)
        finally:
            os.close(ready_r)
            if ready_w >= 0:
                os.close(ready_w)
        self.exit_code = None
        self.exit_reason = ""
        self.finished_at = ""
        self.started_at = now_rfc3339()
        self._started_mono = time.monotonic()
        self.next_start = 0.0
        self.killing = False
        self._cut_at = None

    def reap(self) -> bool:
        """Record an exit if the process has ended; True when it just did."""
        if self.proc is None or self.exit_code is not None:
            return False
        code = self.proc.poll()
        if code is None:
            return False
        # A signal death is reported as 128+signal, as container runtimes do.
        self.exit_code = 128 - code if code < 0 else code
        self.exit_reason = "Completed" if self.exit_code == 0 else "Error"
        self.finished_at = now_rfc3339()
        self._kill_group(signal.SIGKILL)  # the runtime kills the whole cgroup with pid 1
        return True

    def schedule_restart(self) -> None:
        """Set when the next start may happen, doubling the back-off after short runs."""
        ran = time.monotonic() - self._started_mono
        if ran > BACKOFF_MAX_SECONDS * 2:
            self.backoff = BACKOFF_INITIAL_SECONDS
        self.next_start = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, BACKOFF_MAX_SECONDS)

    def archive_for_restart(self) -> None:
        """Move the terminated state to lastState before a restart."""
        self.last_state = {"terminated": {
            "exitCode": self.exit_code, "reason": self.exit_reason,
            "startedAt": self.started_at, "finishedAt": self.finished_at}}

    def _kill_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self, grace_seconds: int, target: ProbeTarget) -> None:
        """Stop the container as the kubelet does; returns once it has exited."""
        self.killing = True
        hook = (self.spec.get("lifecycle") or {}).get("preStop")
        grace = grace_seconds
        if hook and grace > 0 and self.running and not self._cut():
            started = time.monotonic()
            self._pre_stop(hook, grace, target)
            grace -= int(time.monotonic() - started)
        grace = max(grace, MINIMUM_GRACE_SECONDS)
        if self.proc is None:
            return
        if self.running:
            log.info("container %s: SIGTERM, %ds until SIGKILL", self.name, grace)
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        termed = time.monotonic()
        while self.proc.poll() is None:
            kill_at = termed + grace
            if self._cut_at is not None:
                kill_at = min(kill_at, max(self._cut_at, termed + MINIMUM_GRACE_SECONDS))
            if time.monotonic() >= kill_at:
                log.info("container %s: grace period over, SIGKILL", self.name)
                self._kill_group(signal.SIGKILL)
                self.proc.wait()
                break
            time.sleep(KILL_POLL_SECONDS)
        self.reap()

    def shorten(self, grace_seconds: int) -> None:
        """The pod's grace period is now ``grace_seconds`` from this moment (never lengthened)."""
        cut_at = time.monotonic() + max(grace_seconds, 0)
        if self._cut_at is None or cut_at < self._cut_at:
            self._cut_at = cut_at
            log.info("container %s: grace period shortened to %ds", self.name, grace_seconds)

    def _cut(self) -> bool:
        return self._cut_at is not None and time.monotonic() >= self._cut_at

    def _pre_stop(self, hook: Json, grace: int, target: ProbeTarget) -> None:
        if "sleep" in hook:
            seconds = min(int(hook["sleep"]["seconds"]), grace)
            log.info("container %s: preStop sleep %ds", self.name, seconds)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not self._cut():
                time.sleep(min(KILL_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                self.reap()
            return
        ok, message = target.run(hook, float(grace))
        log.info("container %s: preStop %s %s", self.name, "done" if ok else "failed", message)
