"""The cluster's share lock: an exclusive test waiting keeps later tests out, so it waits only for
the tests already running (threads stand for test processes: flock locks belong to open files)."""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lbconform.pytest_plugin import cluster_share, one_batch_at_a_time
from lbconform.wait import poll_until

#: How long a holder that must be blocked is given to (wrongly) get in.
BLOCKED_SECONDS = 0.5
#: How long a holder that may get in, or a thread that must end, is given to.
IN_SECONDS = 5.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    poll_until(condition, timeout=IN_SECONDS, interval=0.01, description=what)


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
            release[name].wait(IN_SECONDS)

    first = threading.Thread(target=hold, args=("first", False))
    first.start()
    wait_for(lambda: order == ["first"], "the first shared holder to get in")
    waiting = threading.Thread(target=hold, args=("exclusive", True))
    waiting.start()
    # The exclusive holder waits for "first", holding the gate.
    wait_for(lambda: gate_taken(path), "the exclusive holder to wait at the gate")
    later = threading.Thread(target=hold, args=("later", False))
    later.start()
    time.sleep(BLOCKED_SECONDS)
    assert order == ["first"], "a shared holder got in beside a waiting exclusive one"
    release["first"].set()
    wait_for(lambda: len(order) == 2, "the exclusive holder to get in after the first left")
    time.sleep(BLOCKED_SECONDS)
    assert order == ["first", "exclusive"], "a shared holder got in beside an exclusive one"
    release["exclusive"].set()
    release["later"].set()
    for thread in (first, waiting, later):
        thread.join(IN_SECONDS)
    assert order == ["first", "exclusive", "later"]


def test_shared_holders_hold_together(tmp_path: Path) -> None:
    """A shared holder gets in while another is in (a wrong exclusive or a gate kept would hold it
    off: the test then fails on its deadline instead of hanging)."""
    path = tmp_path / "cluster.lock"
    inside = threading.Event()

    def second() -> None:
        with cluster_share(path, False):
            inside.set()

    with cluster_share(path, False):
        thread = threading.Thread(target=second, daemon=True)
        thread.start()
        assert inside.wait(IN_SECONDS), "a shared holder was kept out while another was in"
    thread.join(IN_SECONDS)


def test_shared_holders_that_both_turn_exclusive_get_the_cluster_alone_one_after_the_other(
        tmp_path: Path) -> None:
    """Two tests in shared that both change a node (``take_alone``) neither wait for each other
    forever (each leaves before it comes back alone) nor are ever alone together."""
    path = tmp_path / "cluster.lock"
    both_in = threading.Barrier(2, timeout=IN_SECONDS)
    alone: list[str] = []
    overlaps: list[str] = []

    def hold(name: str) -> None:
        with cluster_share(path, False) as share:
            both_in.wait()
            share.take_alone()
            assert share.alone
            if alone and alone[-1].endswith("in"):
                overlaps.append(name)
            alone.append(f"{name} in")
            time.sleep(BLOCKED_SECONDS)
            alone.append(f"{name} out")

    threads = [threading.Thread(target=hold, args=(n,), daemon=True) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(IN_SECONDS + 2 * BLOCKED_SECONDS)
    assert not any(t.is_alive() for t in threads), "two holders turning exclusive waited for each other"
    assert not overlaps and len(alone) == 4, alone


def test_a_shared_holder_turning_exclusive_waits_for_the_others_and_keeps_later_ones_out(
        tmp_path: Path) -> None:
    path = tmp_path / "cluster.lock"
    order: list[str] = []
    release = {name: threading.Event() for name in ("other", "later")}

    def hold(name: str) -> None:
        with cluster_share(path, False):
            order.append(name)
            release[name].wait(IN_SECONDS)

    other = threading.Thread(target=hold, args=("other",))
    other.start()
    wait_for(lambda: order == ["other"], "the other shared holder to get in")
    with cluster_share(path, False) as share:
        turning = threading.Thread(target=share.take_alone)
        turning.start()
        wait_for(lambda: gate_taken(path), "the holder turning exclusive to wait at the gate")
        later = threading.Thread(target=hold, args=("later",))
        later.start()
        time.sleep(BLOCKED_SECONDS)
        assert order == ["other"] and turning.is_alive(), "it did not wait for the other holder"
        release["other"].set()
        turning.join(IN_SECONDS)
        assert share.alone and not turning.is_alive()
        time.sleep(BLOCKED_SECONDS)
        assert order == ["other"], "a later holder got in beside one that is alone"
    wait_for(lambda: order == ["other", "later"], "the later holder to get in once it left")
    release["later"].set()
    for thread in (other, later):
        thread.join(IN_SECONDS)


def test_a_batch_waits_for_another_runs_batch_of_its_kind_and_no_other(tmp_path: Path) -> None:
    """Two runs' batches of one kind (a thread each) take turns; a batch of another kind does not
    wait, and neither does a test holding the share lock."""
    first_in, release, order = threading.Event(), threading.Event(), []
    scale = tmp_path / "batch-scale.lock"

    def first() -> None:
        with one_batch_at_a_time(scale):
            order.append("first in")
            first_in.set()
            release.wait(IN_SECONDS)
            order.append("first out")

    def second() -> None:
        with one_batch_at_a_time(scale):
            order.append("second in")

    a = threading.Thread(target=first)
    a.start()
    assert first_in.wait(IN_SECONDS)
    b = threading.Thread(target=second)
    b.start()
    time.sleep(BLOCKED_SECONDS)
    assert order == ["first in"], "the second batch got in beside the first"
    with one_batch_at_a_time(tmp_path / "batch-other.lock"), cluster_share(tmp_path / "cluster.lock", False):
        pass
    release.set()
    a.join(IN_SECONDS)
    b.join(IN_SECONDS)
    assert order == ["first in", "first out", "second in"]
