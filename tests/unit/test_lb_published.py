"""The reference LB's BackendPool objects: their content is the state API's pool, and they are
written only when it changed, created when missing, deleted on release, and a failure neither
raises nor makes a request every pass. Against a recording stand-in for the apiserver; that the
objects appear in a cluster is a lab test (``tests/lab/test_lb.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from lbconform.kube.rawapi import ApiError, Json, RawApi
from lbconform_lab.lb import published
from lbconform_lab.lb.controller import Controller, ServiceState
from lbconform_lab.lb.model import Backend
from lbconform_lab.lb.params import Params
from lbconform_lab.lb.view import describe

PATH = "/apis/lab.lbconform.io/v1alpha1/namespaces/ns/backendpools"


class Api:
    """Records every request; answers with the next error queued for its method, if any."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Json | None]] = []
        self.errors: dict[str, list[int]] = {"patch": [], "post": [], "delete": []}

    def _call(self, method: str, path: str, body: Json | None) -> Json:
        self.calls.append((method, path, body))
        if self.errors[method]:
            status = self.errors[method].pop(0)
            raise ApiError(status, "Failed", f"{method} {path}")
        return {}

    def patch(self, path: str, body: Json, content_type: str = "") -> Json:
        return self._call("patch", path, body)

    def post(self, path: str, body: Json) -> Json:
        return self._call("post", path, body)

    def delete(self, path: str, body: Json | None = None) -> Json:
        return self._call("delete", path, body)

    def methods(self) -> list[str]:
        return [c[0] for c in self.calls]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(mode: str = "node", healthy: tuple[str, ...] = ("node-1", "node-3")) -> ServiceState:
    """Three nodes in the pool, added out of order, two of them healthy."""
    pool = {name: Backend(name, f"198.19.0.1{name[-1]}", ((("TCP", 80), 80),), None)
            for name in ("node-3", "node-1", "node-2")}
    return ServiceState("ns/backend", "uid-1", "198.18.0.10", 1, params=Params(mode=mode), pool=pool,
                        healthy=list(healthy))


def publisher() -> tuple[published.Published, Api, Clock]:
    api, clock = Api(), Clock()
    return published.Published(api, clock), api, clock  # type: ignore[arg-type]


def test_the_status_is_the_state_apis_pool_with_its_healthy_flags() -> None:
    st = state("pod")
    status = published.pool_status(st)
    assert status == {"service": "ns/backend", "mode": "pod", "members": [
        {"name": "node-1", "address": "198.19.0.11", "healthy": True},
        {"name": "node-2", "address": "198.19.0.12", "healthy": False},
        {"name": "node-3", "address": "198.19.0.13", "healthy": True}]}
    described = describe(st)
    assert status["members"] == [{k: b[k] for k in ("name", "address", "healthy")} for b in described["pool"]]
    assert status["mode"] == described["mode"] and status["service"] == described["service"]


def test_the_object_is_named_as_its_service_and_owned_by_it() -> None:
    obj = published.pool_object("ns/backend", "uid-1", {"members": []})
    assert obj["apiVersion"] == "lab.lbconform.io/v1alpha1" and obj["kind"] == "BackendPool"
    assert obj["metadata"]["name"] == "backend" and obj["metadata"]["namespace"] == "ns"
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "backend",
                                                   "uid": "uid-1", "controller": True,
                                                   "blockOwnerDeletion": False}]
    assert obj["status"] == {"members": []}


def test_the_crd_serves_the_kind_the_lb_writes() -> None:
    crd = published.crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{published.PLURAL}.{published.GROUP}"
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"], spec["scope"]) == (
        published.GROUP, published.KIND, published.PLURAL, "Namespaced")
    version = spec["versions"][0]
    assert version["name"] == published.VERSION and version["served"] and version["storage"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    member = status["properties"]["members"]["items"]
    assert {k: v["type"] for k, v in member["properties"].items()} == {
        "name": "string", "address": "string", "healthy": "boolean"}
    assert status["properties"]["mode"]["type"] == "string"
    assert "subresources" not in version  # status is written with the object itself


def test_a_pool_is_written_once_per_change() -> None:
    pub, api, _ = publisher()
    st = state()
    pub.sync(st)
    pub.sync(st)
    assert api.methods() == ["patch"]
    _, path, body = api.calls[0]
    assert path == f"{PATH}/backend" and body is not None
    assert body["status"] == published.pool_status(st)
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    st.healthy = ["node-1"]  # a health change alone is a change
    pub.sync(st)
    assert api.methods() == ["patch", "patch"]
    assert [m["healthy"] for m in api.calls[1][2]["status"]["members"]] == [True, False, False]  # type: ignore[index]


def test_a_missing_object_is_created_and_a_race_is_settled_on_the_next_pass() -> None:
    pub, api, _ = publisher()
    st = state()
    api.errors["patch"] = [404]
    pub.sync(st)
    assert api.methods() == ["patch", "post"]
    assert api.calls[1][1] == PATH and api.calls[1][2] == published.pool_object(
        "ns/backend", "uid-1", published.pool_status(st))
    pub.sync(st)
    assert api.methods() == ["patch", "post"]

    pub, api, _ = publisher()
    api.errors["patch"], api.errors["post"] = [404], [409]
    pub.sync(st)
    pub.sync(st)  # made meanwhile: patched at once
    assert api.methods() == ["patch", "post", "patch"]


@pytest.mark.parametrize("status", [403, 404, 500])
def test_a_failed_write_waits_before_it_is_tried_again(status: int, caplog: pytest.LogCaptureFixture) -> None:
    pub, api, clock = publisher()
    st = state()
    api.errors["patch"], api.errors["post"] = [404], [status]  # a terminating namespace, no CRD, ...
    pub.sync(st)
    pub.sync(st)
    assert api.methods() == ["patch", "post"]
    assert bool(caplog.records) == (status == 500)  # a namespace going away is no news
    clock.now += published.RETRY_SECONDS
    pub.sync(st)
    assert api.methods() == ["patch", "post", "patch"]


def test_a_new_service_of_the_same_name_gets_its_owner_written() -> None:
    pub, api, _ = publisher()
    st = state()
    pub.sync(st)
    st.uid = "uid-2"
    pub.sync(st)
    assert [c[2]["metadata"]["ownerReferences"][0]["uid"] for c in api.calls] == ["uid-1", "uid-2"]  # type: ignore[index]


def test_a_released_service_loses_its_object_and_a_failed_deletion_is_tried_again() -> None:
    pub, api, clock = publisher()
    st = state()
    pub.sync(st)
    api.errors["delete"] = [500]
    pub.remove("ns/backend")
    pub.retry_removals({})
    assert api.methods() == ["patch", "delete"]
    clock.now += published.RETRY_SECONDS
    api.errors["delete"] = [404]  # gone meanwhile (the garbage collector): done
    pub.retry_removals({})
    pub.retry_removals({})
    assert api.methods() == ["patch", "delete", "delete"] and api.calls[-1][1] == f"{PATH}/backend"
    pub.sync(st)  # provisioned again: written again, though the content is the same
    assert api.methods()[-1] == "patch"


def test_the_controller_deletes_the_object_when_it_lets_a_service_go() -> None:
    api = Api()
    c = Controller(api, "node", set())  # type: ignore[arg-type]
    c.services["ns/backend"] = state()
    c._forget("ns/backend")
    assert api.calls == []  # the pass only notes it: the writer's thread deletes it
    c.published.flush()
    assert api.calls == []  # once the pass's rules are in
    c.published.commit()
    c.published.flush()
    assert api.calls == [("delete", f"{PATH}/backend", None)]


def test_an_unreachable_apiserver_is_a_failed_write(monkeypatch: pytest.MonkeyPatch) -> None:
    pub, api, clock = publisher()

    def refused(*_: Any) -> Json:
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(api, "patch", refused)
    pub.sync(state())
    assert pub.not_before["ns/backend"] == clock.now + published.RETRY_SECONDS


def test_an_unchanged_object_is_written_again_after_the_resync_time() -> None:
    pub, api, clock = publisher()
    st = state()
    pub.sync(st)
    clock.now += published.RESYNC_SECONDS - 1
    pub.sync(st)
    assert api.methods() == ["patch"]
    clock.now += published.RESYNC_SECONDS / 2 + 1  # deleted behind the LB's back meanwhile: it comes back
    api.errors["patch"] = [404]
    pub.sync(st)
    assert api.methods() == ["patch", "patch", "post"]


def test_a_group_the_apiserver_does_not_serve_is_a_404(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the CRD is Established the apiserver answers its paths in plain text, not a Status."""

    class Response:
        status, reason = 404, "Not Found"

        def read(self) -> bytes:
            return b"404 page not found\n"

    monkeypatch.setattr(RawApi, "_call", lambda *_: Response())
    with pytest.raises(ApiError) as err:
        RawApi(None).patch(f"{PATH}/backend", {})  # type: ignore[arg-type]
    assert err.value.status == 404 and "404 page not found" in err.value.message
    pub = published.Published(RawApi(None))  # type: ignore[arg-type]
    pub.sync(state())  # neither raises nor counts as written
    assert "ns/backend" not in pub.written and "ns/backend" in pub.not_before


def test_the_pass_only_notes_the_content_and_the_writer_writes_the_latest() -> None:
    """The pass never waits on the apiserver (the state API waits for the pass): it notes what each
    object should say, and the writer's flush writes only the latest of it."""
    pub, api, _ = publisher()
    writer = published.Publisher(pub)
    st = state()
    writer.sync(st)
    st.healthy = ["node-2"]
    writer.sync(st)
    writer.retry_removals({"ns/backend"})
    writer.flush()
    assert api.calls == []  # nothing is written before the pass's rules are in
    writer.commit()
    writer.flush()
    assert api.methods() == ["patch"]
    assert [m["healthy"] for m in api.calls[0][2]["status"]["members"]] == [False, True, False]  # type: ignore[index]
    writer.remove("ns/backend")
    writer.commit()
    writer.flush()
    assert api.methods() == ["patch", "delete"]
