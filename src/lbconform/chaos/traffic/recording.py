"""The recordings a chaos process started: the recorder's process, its result file, its marks.

chaostoolkit gives an action's output to no later activity, so the probes find the traffic
an action started here, by name, in the same ``chaos run`` process. Nothing recorded means
no traffic was started yet, which is how the hypothesis reads before the method.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from chaoslib.exceptions import ActivityFailed

log = logging.getLogger(__name__)

#: Beyond its planned seconds a recorder needs one request timeout to drain its last requests
#: and a second or two to start Python; this bounds the wait for its result.
RESULT_SLACK_SECONDS: Final = 30.0
#: A recorder asked to stop early gets this long after SIGTERM before SIGKILL.
STOP_GRACE_SECONDS: Final = 5.0


@dataclass
class Recording:
    name: str
    out: Path
    log: Path
    proc: subprocess.Popen[bytes]
    seconds: float
    started_monotonic: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)
    result: dict[str, Any] | None = None

    def wait(self) -> dict[str, Any]:
        """The recorder's result, waiting (bounded) for it to finish."""
        if self.result is not None:
            return self.result
        bound = self.seconds + RESULT_SLACK_SECONDS
        remaining = max(0.0, self.started_monotonic + bound - time.monotonic())
        try:
            self.proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            raise ActivityFailed(f"traffic recorder {self.name} (pid {self.proc.pid}) has not finished "
                                 f"{bound:g}s after it started; its log: {self.log}") from None
        try:
            doc: dict[str, Any] = json.loads(self.out.read_text())
        except (OSError, ValueError) as exc:
            raise ActivityFailed(f"traffic recorder {self.name} exited with {self.proc.returncode} and "
                                 f"left no result ({exc}); its log: {self.log}") from None
        if doc.get("error"):
            raise ActivityFailed(f"traffic recorder {self.name} failed: {doc['error']}")
        self.result = doc
        return doc

    def stop(self) -> None:
        """End the recorder if it still runs: SIGTERM, then SIGKILL, by its pid only."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_GRACE_SECONDS)


_RECORDINGS: dict[str, Recording] = {}


def state_dir(configured: object = None) -> Path:
    path = Path(str(configured)) if configured else Path(tempfile.gettempdir())
    path.mkdir(parents=True, exist_ok=True)
    return path


def start(name: str, argv: list[str], seconds: float, directory: Path) -> Recording:
    """Start a recorder detached (its own session), replacing an earlier recording of ``name``."""
    earlier = _RECORDINGS.pop(name, None)
    if earlier is not None:
        earlier.stop()
    stem = f"lbconform-traffic-{os.getpid()}-{name}"
    out, log_path = directory / f"{stem}.json", directory / f"{stem}.log"
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "lbconform.chaos.traffic.recorder", *argv,
                                 "--out", str(out)],
                                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    rec = Recording(name, out, log_path, proc, seconds)
    _RECORDINGS[name] = rec
    log.info("traffic recorder %s started, pid %d, result in %s", name, proc.pid, out)
    return rec


def get(name: str) -> Recording | None:
    return _RECORDINGS.get(name)


def forget(name: str) -> Recording | None:
    rec = _RECORDINGS.pop(name, None)
    if rec is not None:
        rec.stop()
    return rec


def failures(doc: dict[str, Any], kinds: set[str] | None, since: float | None) -> int:
    """Failures in a result, of ``kinds`` (all when None), at or after ``since`` (all when None)."""
    if since is None:
        outcomes: dict[str, int] = doc.get("outcomes", {})
        return sum(n for k, n in outcomes.items() if kinds is None or k in kinds)
    return sum(1 for f in doc.get("failures", [])
               if (kinds is None or f["kind"] in kinds) and f["at"] >= since)


def failures_away_from_moves(doc: dict[str, Any], in_flight: float) -> list[dict[str, Any]]:
    """The failures of a result that no move of the address explains: a failure is explained when
    its request started at most ``in_flight`` seconds before the answering backend changed (the
    start of the first request the next backend answered), so it may have been under way when
    the address moved. The first answer of all is no move."""
    moves = [float(at) for at, _ in doc.get("backend_changes", [])[1:]]
    return [f for f in doc.get("failures", [])
            if not any(move - in_flight <= f["at"] <= move for move in moves)]
