"""A declaration's interface: what a Service asks an implementation for and where the harness reads
its pool, as data. Over the generic provider, the worked examples ask and read as the providers
written for those implementations do, and a pool is read out of published objects as theirs is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lbconform import providers
from lbconform.declared_provider import apply_declaration
from lbconform.interface import PoolSource, Problem, expand_addresses, parse, parse_path, show_path
from lbconform.providers.base import NODE_POOL, POD_POOL, NotSupported, PoolMember, ServiceRef
from lbconform.providers.metallb import pool_from_statuses

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_LB = ROOT / "docs" / "declarations" / "reference-lb.yaml"
METALLB = ROOT / "docs" / "declarations" / "metallb.yaml"


@pytest.mark.parametrize("text, parts", [
    ("status.members", ("status", "members")),
    ("metadata.labels[metallb.io/node]", ("metadata", "labels", "metallb.io/node")),
    ("[a.b].c", ("a.b", "c")),
])
def test_a_field_path_names_keys_and_bracketed_keys(text: str, parts: tuple[str, ...]) -> None:
    assert parse_path(text, "x") == parts
    assert parse_path(show_path(parts), "x") == parts


@pytest.mark.parametrize("text", ["", "a..b", "a.", "a[b", 5])
def test_a_bad_field_path_names_its_field(text: Any) -> None:
    with pytest.raises(Problem, match=r"^interface\.x: "):
        parse_path(text, "interface.x")


def test_addresses_ranges_and_cidrs_expand_and_stop_at_the_most() -> None:
    assert expand_addresses(["10.0.0.1", "10.0.0.5-10.0.0.7", "10.0.1.0/30"]) == [
        "10.0.0.1", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.1.1", "10.0.1.2"]
    assert len(expand_addresses(["10.0.0.0/8"])) == 64
    assert expand_addresses(["10.0.0.1-10.0.0.9"], most=2) == ["10.0.0.1", "10.0.0.2"]


# --- the worked examples ask as the providers written for their implementations do ---------------------


def test_the_reference_lb_example_asks_the_lb_as_the_lab_provider_does() -> None:
    lab = providers.load("lab")
    example = apply_declaration(providers.load("generic"), REFERENCE_LB)
    assert example.idle_timeout_to_ask() == lab.idle_timeout_to_ask() == 60
    assert example.idle_timeout_annotations(60) == lab.idle_timeout_annotations(60)
    for reset in (True, False):
        assert example.idle_reset_annotations(reset) == lab.idle_reset_annotations(reset)
    assert example.pod_pool_annotations() == lab.pod_pool_annotations()
    assert example.requestable_addresses() == lab.requestable_addresses()
    assert example.address_request("198.18.0.240") == lab.address_request("198.18.0.240") == {}
    assert example.service_annotations() == lab.service_annotations() == {}
    assert example.needs_node_ports() is lab.needs_node_ports() is False


def test_the_metallb_example_claims_and_asks_what_the_metallb_provider_does() -> None:
    metallb = providers.load("metallb")
    example = apply_declaration(providers.load("generic"), METALLB)
    assert example.declared() == metallb.declared()
    for policy in ("Cluster", "Local"):
        assert example.declared_for(policy) == metallb.declared_for(policy)
    assert (example.features(), example.timeouts()) == (metallb.features(), metallb.timeouts())
    assert example.address_request("198.18.0.240") == metallb.address_request("198.18.0.240")
    assert example.node_agents() == metallb.node_agents()
    assert example.requestable_addresses() == expand_addresses(["198.18.0.240-198.18.0.254"])
    with pytest.raises(NotSupported):  # what the interface says, the generic provider alone cannot
        providers.load("generic").requestable_addresses()


# --- a pool read out of the objects an implementation publishes -----------------------------------------


def _l2_status(node_label: str | None, node: str, service: str, namespace: str = "ns") -> dict[str, Any]:
    labels = {"metallb.io/node": node_label} if node_label else {}
    return {"metadata": {"labels": labels},
            "status": {"node": node, "serviceName": service, "serviceNamespace": namespace}}


def test_metallbs_announcing_nodes_read_as_data_equal_the_providers() -> None:
    source = parse({"backendPool": {
        "apiVersion": "metallb.io/v1beta1", "resource": "servicel2statuses", "namespace": "metallb-system",
        "match": {"status.serviceNamespace": "{namespace}", "status.serviceName": "{name}"},
        "node": ["metadata.labels[metallb.io/node]", "status.node"]}}).backend_pool
    assert source is not None
    statuses = [_l2_status("node-2", "node-1", "web"),  # the label wins over a stale status.node
                _l2_status(None, "node-3", "web"), _l2_status("node-1", "node-1", "other"),
                _l2_status("node-1", "node-1", "web", namespace="elsewhere")]
    ips = {"node-1": "10.0.0.1", "node-2": "10.0.0.2", "node-3": "10.0.0.3"}
    assert source.pool(statuses, "ns", "web", ips) == pool_from_statuses(statuses, "ns", "web", ips) == [
        PoolMember("10.0.0.2", None, "node-2"), PoolMember("10.0.0.3", None, "node-3")]
    assert source.collection("ns", "web") == \
        "/apis/metallb.io/v1beta1/namespaces/metallb-system/servicel2statuses"
    assert source.object_path("ns", "web") is None


def test_members_listed_in_one_object_keep_their_health() -> None:
    source = PoolSource("lab.lbconform.io/v1alpha1", "backendpools", object_name="{name}",
                        members=("status", "members"), address=("address",), member_name=("name",),
                        healthy=("healthy",))
    obj = {"status": {"members": [{"name": "node-2", "address": "10.0.0.2", "healthy": False},
                                  {"name": "node-1", "address": "10.0.0.1", "healthy": True},
                                  {"name": "broken"}]}}
    assert source.pool([obj], "ns", "web", {}) == [PoolMember("10.0.0.1", True, "node-1"),
                                                   PoolMember("10.0.0.2", False, "node-2")]
    assert source.object_path("ns", "web") == "/apis/lab.lbconform.io/v1alpha1/namespaces/ns/backendpools/web"


class _Api:
    """The cluster's answers a declared provider reads (a Service, published objects), from the
    apiserver at ``host``."""

    def __init__(self, answers: dict[str, Any], host: str = "https://198.51.100.1:6443") -> None:
        self.answers = answers
        self.api = SimpleNamespace(configuration=SimpleNamespace(host=host))

    def get(self, path: str) -> Any:
        from lbconform.kube.rawapi import ApiError

        if path not in self.answers:
            raise ApiError(404, "NotFound", path)
        return self.answers[path]


def test_the_pool_kind_follows_the_pod_pool_annotations_on_the_service() -> None:
    example = apply_declaration(providers.load("generic"), REFERENCE_LB)
    svc = "/api/v1/namespaces/ns/services/"
    example.inner.api = _Api({svc + "pods": {"metadata": {"annotations": {"lab.lbconform.io/mode": "pod"}}},
                              svc + "nodes": {"metadata": {}}})  # type: ignore[assignment]
    assert example.pool_kind(ServiceRef("ns", "pods")) == POD_POOL
    assert example.pool_kind(ServiceRef("ns", "nodes")) == NODE_POOL


def test_a_pool_not_published_yet_is_empty_and_an_unserved_resource_not_supported() -> None:
    example = apply_declaration(providers.load("generic"), REFERENCE_LB)
    served = {"/apis/lab.lbconform.io/v1alpha1": {"resources": [{"name": "backendpools"}]},
              "/api/v1/nodes": {"items": []}}
    example.inner.api = _Api(served)  # type: ignore[assignment]
    assert example.backend_pool(ServiceRef("ns", "web")) == []
    del served["/apis/lab.lbconform.io/v1alpha1"]  # the next polls do not ask discovery again
    assert example.backend_pool(ServiceRef("ns", "web")) == []
    example.inner.api = _Api({"/api/v1/nodes": {"items": []}}, "https://198.51.100.2:6443")  # type: ignore[assignment]
    with pytest.raises(NotSupported, match=r"serves no backendpools of lab\.lbconform\.io/v1alpha1"):
        example.backend_pool(ServiceRef("ns", "web"))
