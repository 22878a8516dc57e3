"""Progress of a run on a terminal: tests done, the tests running, and the waits they are in.

``lbconform run`` turns it on only when its output is a terminal and ``CI`` is unset (in CI a
run stays quiet: pytest's dots and the summary). Waits happen in the test processes (xdist
workers included), so each process writes its current wait, with its deadline, to a small
file in a directory named by ``LBCONFORM_PROGRESS_DIR``; the controller's status line reads
them. Nothing here may fail a test: every write and read is best effort.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # the waits run in the lab's processes too, which never import pytest
    import pytest

ENV = "LBCONFORM_PROGRESS_DIR"
#: How often the status line is redrawn.
REDRAW_SECONDS = 0.5


def wanted(stream: TextIO = sys.stderr) -> bool:
    """A live status line only on a terminal, and never in CI."""
    return stream.isatty() and not os.environ.get("CI")


@contextlib.contextmanager
def waiting(description: str, timeout: float) -> Iterator[None]:
    """Say, while the block runs, that this process waits for ``description`` until a deadline."""
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    path = Path(folder) / f"{os.getpid()}.json"
    with contextlib.suppress(OSError):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"description": description, "deadline": time.time() + timeout,
                                   "timeout": timeout}))
        os.replace(tmp, path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def terminal() -> TextIO | None:
    """The controlling terminal, written to directly: pytest captures stderr (its file
    descriptor too) from before any plugin starts, so a status line cannot go there."""
    try:
        return open("/dev/tty", "w", encoding="utf-8")  # closed at session finish
    except OSError:
        return None


def read_waits(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(path.read_text()))
    return out


def status_line(done: int, total: int, failed: int, running: list[str], waits: list[dict[str, Any]],
                now: float, width: int = 120) -> str:
    """``[12/41] 1 failed | test_x::y | waiting 12s of 60s: the LB's healthy set ...``, cut to
    ``width``."""
    parts = [f"[{done}/{total}]"]
    if failed:
        parts.append(f"{failed} failed")
    if running:
        parts.append(running[-1].split("::", 1)[-1] + (f" (+{len(running) - 1})" if len(running) > 1 else ""))
    if waits:
        w = min(waits, key=lambda x: float(x["deadline"]))
        left = max(0.0, float(w["deadline"]) - now)
        parts.append(f"waiting {float(w['timeout']) - left:.0f}s of {float(w['timeout']):.0f}s: "
                     f"{w['description']}")
    line = " | ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


class Progress:
    """The controller's status line (a pytest plugin registered by lbconform's plugin)."""

    def __init__(self, folder: Path, stream: TextIO = sys.stderr) -> None:
        self.folder, self.stream = folder, stream
        self.total = self.done = self.failed = 0
        self.running: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._redraw, name="lbconform-progress", daemon=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self._thread.start()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running.append(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.when in ("setup", "call"):
            self.failed += 1
        if report.when == "teardown":
            self.done += 1
            with contextlib.suppress(ValueError):
                self.running.remove(report.nodeid)

    def pytest_sessionfinish(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with contextlib.suppress(OSError, ValueError):
            self.stream.write("\r\033[K")
            self.stream.flush()
            if self.stream is not sys.stderr:
                self.stream.close()

    def _redraw(self) -> None:
        while not self._stop.wait(REDRAW_SECONDS):
            width = 120
            with contextlib.suppress(OSError):
                width = os.get_terminal_size(self.stream.fileno()).columns
            line = status_line(self.done, self.total, self.failed, list(self.running),
                               read_waits(self.folder), time.time(), width - 1)
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\033[K" + line)
                self.stream.flush()
