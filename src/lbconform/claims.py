"""Claims on shared, named things (the addresses Services may ask for) among the harness runs on
this machine.

A run takes one that no other run holds, the least recently released first, and holds it until
its test is over (and the Service that used it is gone). A claim is an ``flock`` on a file named
after the thing, so a run that dies releases its claims with its process; the file's time is
when it was last released. Runs on other machines against the same cluster do not see these
claims: such runs must not share requestable addresses.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from lbconform.errors import LbconformError


class NothingToClaim(LbconformError):
    """Every candidate is held by another run."""


def _last_released(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


@contextlib.contextmanager
def claim(directory: Path, candidates: Sequence[str]) -> Iterator[str]:
    """Hold one of ``candidates`` that no other holder has, the least recently released first."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {c: directory / c.replace("/", "_") for c in candidates}
    for candidate in sorted(candidates, key=lambda c: (_last_released(paths[c]), c)):
        fd = os.open(paths[candidate], os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield candidate
        finally:
            os.utime(paths[candidate])
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise NothingToClaim(f"all {len(candidates)} of {', '.join(candidates[:3])}... are held by other runs on "
                         f"this machine ({directory}): run fewer at once, or declare more")
