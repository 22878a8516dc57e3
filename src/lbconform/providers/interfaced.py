"""Acting on a declaration's ``interface`` through the cluster's API: a Service's backend pool read
from the objects the implementation publishes, and its controller or agents as workloads to restart.

The section's format and its pure parts are ``lbconform.interface``'s; this module is the API calls.
"""

from __future__ import annotations

from typing import Any

from lbconform.interface import PoolSource, WorkloadRef
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.kube.workload import Workload
from lbconform.providers.base import NotSupported, PoolMember, ServiceRef
from lbconform.providers.support import cluster_nodes


def read_pool(api: RawApi, source: PoolSource, service: ServiceRef) -> list[PoolMember]:
    """The Service's pool as the objects ``source`` names show it: empty while there is none (the
    implementation has not published it yet); not supported where the cluster does not serve the
    resource at all."""
    one = source.object_path(service.namespace, service.name)
    try:
        objects: list[dict[str, Any]] = ([api.get(one)] if one is not None else
                                         api.get(source.collection(service.namespace, service.name))
                                         .get("items", []))
    except ApiError as exc:
        if exc.status != 404:
            raise
        if one is None or not _served(api, source):
            raise NotSupported(f"the cluster serves no {source.resource} of {source.api_version}, which the "
                               "declaration's interface.backendPool reads the pool from") from None
        objects = []
    node_ips = cluster_nodes(api).ip_by_name if source.node else {}
    return source.pool(objects, service.namespace, service.name, node_ips)


#: (apiserver, apiVersion, resource) found served: a resource a cluster serves stays served for a
#: run, so the polls that wait for a pool to be published ask discovery once, not each time.
_SERVED: set[tuple[str, str, str]] = set()


def _served(api: RawApi, source: PoolSource) -> bool:
    """Whether the cluster serves ``source``'s resource (a 404 for one object is then only that)."""
    key = (str(api.api.configuration.host), source.api_version, source.resource)
    if key in _SERVED:
        return True
    group = "api" if "/" not in source.api_version else "apis"
    try:
        resources = api.get(f"/{group}/{source.api_version}").get("resources", [])
    except ApiError as exc:
        if exc.status != 404:
            raise
        return False
    if any(r.get("name") == source.resource for r in resources):
        _SERVED.add(key)
        return True
    return False


def declared_workload(api: RawApi, ref: WorkloadRef) -> Workload:
    """The Deployment or DaemonSet ``ref`` names, its pods found by its own selector."""
    plural = "deployments" if ref.kind == "Deployment" else "daemonsets"
    try:
        obj = api.get(f"/apis/apps/v1/namespaces/{ref.namespace}/{plural}/{ref.name}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise NotSupported(f"the declaration's {ref.kind} {ref.namespace}/{ref.name} is not in the "
                           "cluster") from None
    labels = obj.get("spec", {}).get("selector", {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return Workload(Applier(api, ref.namespace), ref.kind, ref.name, selector=selector)
