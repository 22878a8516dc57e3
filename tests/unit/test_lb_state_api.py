"""The reference LB's state API answers from the last pass's view, never waiting for a pass.

A pass here is the controller's own ``reconcile`` with an empty cluster (a stand-in for its
informers' caches) held inside its nftables step; the state API is the real server on loopback.
That the API serves the lab's Services is a lab test (``tests/lab/test_lb.py``)."""

from __future__ import annotations

import http.client
import json
import threading
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


#: The controller, the state API's port, and the event that lets the held pass end.
HeldPass = tuple[Controller, int, threading.Event]


@pytest.fixture
def held_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldPass]:
    """A controller whose last pass served ns/a, a pass in progress held in its nftables step, and
    the state API's port; setting the event lets the pass end."""
    c = Controller(NO_API, "node", set())  # type: ignore[arg-type]
    c.watch = EmptyCluster()  # type: ignore[assignment]
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


def test_a_pass_in_progress_holds_no_answer_back(held_pass: HeldPass) -> None:
    _, port, _ = held_pass
    status, svc = request(port, "GET", "/services/ns/a")
    assert status == 200 and svc["vip"] == "198.18.0.10" and svc["healthy"] == ["node-1"]
    status, _ = request(port, "GET", "/services")
    assert status == 200
    status, body = request(port, "PUT", "/defects", {"defects": ["no-drain"], "run": "r1"})
    assert status == 200 and body["defects"] == ["no-drain"]
    assert request(port, "GET", "/defects")[1]["runDefects"] == {"r1": ["no-drain"]}


def test_defects_switched_during_a_pass_apply_from_the_next(held_pass: HeldPass) -> None:
    c, _, release = held_pass
    c.set_defects({"no-drain"})
    assert c.defects_of_run("") == frozenset()  # the pass in progress keeps what it started with
    release.set()
    c.reconcile()  # the next pass (its nftables step no longer held)
    assert c.defects_of_run("") == {"no-drain"}


def test_the_view_changes_only_when_a_pass_ends(held_pass: HeldPass) -> None:
    """The pass in progress has let ns/a go; the API says so once that pass has ended."""
    c, port, release = held_pass
    assert request(port, "GET", "/services/ns/a")[0] == 200
    release.set()
    c.reconcile()
    assert request(port, "GET", "/services/ns/a")[0] == 404


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
