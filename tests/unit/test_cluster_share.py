"""The cluster's share lock: an exclusive test waiting keeps later tests out, so it waits only for
the tests already running (threads stand for test processes: flock locks belong to open files)."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

from lbconform.pytest_plugin import cluster_share

#: How long a holder that must be blocked is given to (wrongly) get in.
BLOCKED_SECONDS = 0.5


def gate_taken(path: Path) -> bool:
    with path.with_suffix(".gate").open("a") as gate:
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(gate, fcntl.LOCK_UN)
        return False


def test_a_waiting_exclusive_holder_goes_before_shared_ones_that_came_after(tmp_path: Path) -> None:
    path = tmp_path / "cluster.lock"
    order: list[str] = []
    release = {name: threading.Event() for name in ("first", "exclusive", "later")}

    def hold(name: str, exclusive: bool) -> None:
        with cluster_share(path, exclusive):
            order.append(name)
            release[name].wait(10)

    first = threading.Thread(target=hold, args=("first", False))
    first.start()
    while order != ["first"]:
        time.sleep(0.01)
    waiting = threading.Thread(target=hold, args=("exclusive", True))
    waiting.start()
    while not gate_taken(path):  # the exclusive holder waits for "first", holding the gate
        time.sleep(0.01)
    later = threading.Thread(target=hold, args=("later", False))
    later.start()
    time.sleep(BLOCKED_SECONDS)
    assert order == ["first"], "a shared holder got in beside a waiting exclusive one"
    release["first"].set()
    while len(order) < 2:
        time.sleep(0.01)
    time.sleep(BLOCKED_SECONDS)
    assert order == ["first", "exclusive"], "a shared holder got in beside an exclusive one"
    release["exclusive"].set()
    release["later"].set()
    for thread in (first, waiting, later):
        thread.join(10)
    assert order == ["first", "exclusive", "later"]


def test_shared_holders_hold_together(tmp_path: Path) -> None:
    path = tmp_path / "cluster.lock"
    with cluster_share(path, False), cluster_share(path, False):
        pass
