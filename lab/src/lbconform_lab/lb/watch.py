"""Watching the cluster: the Services, EndpointSlices and Nodes a reconcile pass reads, and which
Services the LB serves.

One informer per kind keeps a cache of it, as the cloud-provider service controller does, so a pass
reads memory and never the apiserver; every change wakes the controller (``changed``) for a pass.
"""

from __future__ import annotations

from collections.abc import Callable

from lbconform.kube.informer import Informer
from lbconform.kube.rawapi import Json, RawApi
from lbconform.kube.sweeper import RUN_LABEL
from lbconform_lab.lb import LB_CLASS
from lbconform_lab.lb.defects import At, apply
from lbconform_lab.lb.model import NodeInfo
from lbconform_lab.lb.plan import node_infos


def wants_lb(svc: Json, defects: frozenset[str] = frozenset()) -> bool:
    """Whether the LB serves this Service: of type LoadBalancer, without a class or of its own."""
    spec = svc["spec"]
    own_class = apply(At.CLASS, spec.get("loadBalancerClass") in (None, LB_CLASS), defects)
    return bool(spec.get("type") == "LoadBalancer" and own_class)


def run_of(svc: Json) -> str:
    """The harness run a Service belongs to (its ``lbconform.io/run`` label), "" for none."""
    return str((svc["metadata"].get("labels") or {}).get(RUN_LABEL) or "")


class Watch:
    """The informers of Services, EndpointSlices and Nodes."""

    def __init__(self, api: RawApi, changed: Callable[[], None]) -> None:
        def on_event(kind: str, obj: Json) -> None:
            changed()

        self.services = Informer(api, "/api/v1/services", on_event)
        self.slices = Informer(api, "/apis/discovery.k8s.io/v1/endpointslices", on_event)
        self.nodes = Informer(api, "/api/v1/nodes", on_event)

    def start(self) -> None:
        """Start watching, and return once every cache holds a full list."""
        informers = (self.services, self.slices, self.nodes)
        for inf in informers:
            inf.start()
        for inf in informers:
            inf.synced.wait()

    def node_infos(self) -> list[NodeInfo]:
        return node_infos(self.nodes.snapshot())

    def slices_by_service(self) -> dict[str, list[Json]]:
        """Every EndpointSlice, by the key (namespace/name) of the Service it belongs to."""
        slices: dict[str, list[Json]] = {}
        for s in self.slices.snapshot():
            owner = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                slices.setdefault(f"{s['metadata']['namespace']}/{owner}", []).append(s)
        return slices

    def service_list(self) -> list[Json]:
        return self.services.snapshot()
