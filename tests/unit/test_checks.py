"""``wait_for_backends``: which answers end the wait, on a client that answers from a script."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, cast

import pytest

from lbconform.traffic import checks
from lbconform.traffic.client import Client
from lbconform.wait import LbWaitTimeout


class ScriptedClient:
    """Answers ``/hostname`` with the next name of a script."""

    def __init__(self, names: Iterator[str]) -> None:
        self.names = names
        self.asked = 0

    def backend(self, host: str, port: int) -> str:
        self.asked += 1
        return next(self.names)


def wait(names: Iterator[str], want: set[str], timeout: float = 3.0) -> ScriptedClient:
    client = ScriptedClient(names)
    checks.wait_for_backends(cast(Client, cast(Any, client)), "198.18.0.10", 80, want, timeout)
    return client


def test_ends_once_every_wanted_backend_answered() -> None:
    assert wait(itertools.cycle(["a", "b", "c"]), {"a", "b", "c"}).asked == 3


def test_a_change_still_propagating_settles_after_answers_in_a_row() -> None:
    """Three backends answer before a switch to Local takes effect, then only the local one."""
    client = wait(itertools.chain(["b", "c", "a", "b", "c"], itertools.repeat("a")), {"a"})
    assert client.asked == 5 + checks.SETTLED


def test_an_lb_that_keeps_sending_elsewhere_never_settles() -> None:
    """One connection in three to a backend outside the set: the wait fails and names it."""
    with pytest.raises(LbWaitTimeout, match=r"all 1 backends.*'a', 'b'"):
        wait(itertools.cycle(["b", "a", "a"]), {"a"}, timeout=1.5)
