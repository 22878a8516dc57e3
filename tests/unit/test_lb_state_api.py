"""The reference LB's state API answers with the view a pass leaves as it ends: a reader waits for
the pass in progress, a bounded time (then gets the last view), and switching defects never waits.

A pass here is the controller's own ``reconcile`` with an empty cluster (a stand-in for its
informers' caches) held inside its nftables step; the state API is the real server on loopback.
That the API serves the lab's Services is a lab test (``tests/lab/test_lb.py``)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lbconform_lab.lb import api
from lbconform_lab.lb import controller as controller_module
from lbconform_lab.lb.controller import Controller, ServiceState

NO_API: object = None


class EmptyCluster:
    """What the informers' caches hold in a cluster with no node and no Service."""

    def node_infos(self) -> list[Any]:
        return []

    def slices_by_service(self) -> dict[str, list[Any]]:
        return {}

    def service_list(self) -> list[Any]:
        return []


def request(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


#: How long the tests' readers wait for the pass in progress.
BOUND = 0.5

#: The controller, the state API's port, and the event that lets the held pass end.
HeldPass = tuple[Controller, int, threading.Event]


@pytest.fixture
def held_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldPass]:
    """A controller whose last pass served ns/a, a pass in progress held in its nftables step, and
    the state API's port; setting the event lets the pass end."""
    c = Controller(NO_API, "node", set())  # type: ignore[arg-type]
    c.watch = EmptyCluster()  # type: ignore[assignment]
    c.view_wait = BOUND
    c.services["ns/a"] = ServiceState("ns/a", "uid-a", "198.18.0.10", 1, healthy=["node-1"])
    c._publish()
    del c.services["ns/a"]
    entered, release = threading.Event(), threading.Event()

    def held_apply(ruleset: str) -> None:
        entered.set()
        assert release.wait(10)

    monkeypatch.setattr(controller_module.nft, "apply", held_apply)
    server = api.serve(c, "127.0.0.1", 0)
    in_progress = threading.Thread(target=c.reconcile)
    in_progress.start()
    assert entered.wait(5)
    yield c, server.server_address[1], release
    release.set()
    in_progress.join(5)
    server.shutdown()


def test_a_pass_held_past_the_bound_gets_the_last_view(held_pass: HeldPass) -> None:
    """Readers wait for the held pass only as long as the bound, then get the last pass's view;
    switching defects does not wait at all."""
    _, port, _ = held_pass
    started = time.monotonic()
    status, svc = request(port, "GET", "/services/ns/a")
    assert status == 200 and svc["vip"] == "198.18.0.10" and svc["healthy"] == ["node-1"]
    assert BOUND <= time.monotonic() - started < BOUND + 1
    assert request(port, "GET", "/services")[0] == 200
    started = time.monotonic()
    status, body = request(port, "PUT", "/defects", {"defects": ["no-drain"], "run": "r1"})
    assert status == 200 and body["defects"] == ["no-drain"]
    assert time.monotonic() - started < BOUND
    assert request(port, "GET", "/defects")[1]["runDefects"] == {"r1": ["no-drain"]}


def test_a_reader_during_a_pass_gets_that_pass_view(held_pass: HeldPass) -> None:
    """The pass in progress lets ns/a go (as it would remove its finalizer): a reader who asks
    before the pass ends gets the view of that pass, not the one before."""
    c, port, release = held_pass
    c.view_wait = 5.0
    threading.Timer(0.2, release.set).start()
    assert request(port, "GET", "/services/ns/a")[0] == 404


def test_defects_switched_during_a_pass_apply_from_the_next(held_pass: HeldPass) -> None:
    c, _, release = held_pass
    c.set_defects({"no-drain"})
    assert c.defects_of_run("") == frozenset()  # the pass in progress keeps what it started with
    release.set()
    c.reconcile()  # the next pass (its nftables step no longer held)
    assert c.defects_of_run("") == {"no-drain"}


def test_the_view_changes_only_when_a_pass_ends(held_pass: HeldPass) -> None:
    """The pass in progress has let ns/a go; the view says so once that pass has ended."""
    c, _, release = held_pass
    assert "ns/a" in c.view.services
    release.set()
    c.reconcile()
    assert "ns/a" not in c.view.services


def test_a_service_made_after_its_defects_were_switched_meets_them_in_its_first_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness run switches its defects, then makes its Services: a pass that sees such a
    Service sees the defects too (they are read after the Services)."""
    c = Controller(NO_API, "node", set())  # type: ignore[arg-type]

    class SwitchedJustBefore(EmptyCluster):
        def service_list(self) -> list[Any]:
            c.set_defects({"no-drain"}, run="r1")  # the switch, then the Service, then the snapshot
            return []

    c.watch = SwitchedJustBefore()  # type: ignore[assignment]
    monkeypatch.setattr(controller_module.nft, "apply", lambda ruleset: None)
    c.reconcile()
    assert c.defects_of_run("r1") == {"no-drain"}
