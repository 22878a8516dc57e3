"""The provider of GKE LoadBalancer Services: backend service-based passthrough Network Load Balancers.

Every test Service carries ``cloud.google.com/l4-rbs: "enabled"``, so GKE makes a regional
backend service (without it, an external Service gets a legacy target-pool NLB, which has
no backend service to read). GKE's L4 controller (ingress-gce) names that backend service in
the Service's ``service.kubernetes.io/backend-service`` annotation, read through the
cluster's API; without a cluster, the forwarding rule whose address is the Service's
ingress IP leads to it. The pool is ``RegionBackendServicesClient.get_health`` for each of
its backends (instance groups, or ``GCE_VM_IP`` NEGs whose endpoints are the nodes'
internal IPs): one member per node IP, HEALTHY or not.

Why no ``PodBackendPool``: GKE's passthrough L4 load balancers always deliver to nodes
(``GCE_VM_IP`` endpoints are VMs, kube-proxy or Dataplane V2 forwards to pods);
container-native ``GCE_VM_IP_PORT`` NEGs, whose endpoints ``list_network_endpoints`` would
list, back only the proxy load balancers of Ingress and Gateway, never a Service of type
LoadBalancer. ``get_health`` on a NEG already lists its endpoints with their health, so
``list_network_endpoints`` is not needed for node pools either.

Health checks (ingress-gce ``pkg/healthchecksl4``, documented in GKE's LoadBalancer Service
concepts): externalTrafficPolicy Local checks each node's healthCheckNodePort every 3 s,
unhealthy after 2 failures; Cluster uses a shared check of kube-proxy's ``:10256/healthz``
every 8 s, unhealthy after 3; both healthy after 1 success, timeout 1 s. ``declared()``
gives the Local values, ``declared_for("Cluster")`` the shared ones.

Options (``--provider-option NAME=VALUE``):

- ``project`` (env ``GOOGLE_CLOUD_PROJECT``, ``CLOUDSDK_CORE_PROJECT``): the cluster's project.
- ``region`` (env ``GOOGLE_CLOUD_REGION``, ``CLOUDSDK_COMPUTE_REGION``): the cluster's region.

Credentials are Application Default Credentials. The SDK is the ``gke`` extra:
``pip install 'lbconform[gke]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.providers.base import Declared, PoolMember, Provider, ServiceRef
from lbconform.providers.support import cluster_nodes, import_sdk

RBS_ANNOTATION = "cloud.google.com/l4-rbs"
BACKEND_SERVICE_ANNOTATION = "service.kubernetes.io/backend-service"
_SOURCE = "ingress-gce pkg/healthchecksl4 constants; GKE 'About LoadBalancer Services'"


def _name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def backend_service_from_rules(rules: Iterable[Mapping[str, Any]]) -> str:
    """The backend service that forwarding rules (as dicts) send to, by name; '' if none does."""
    return next((_name(r["backend_service"]) for r in rules if r.get("backend_service")), "")


def backend_groups(backend_service: Mapping[str, Any]) -> list[str]:
    """The instance group / NEG URLs of a backend service (as a dict)."""
    return [b["group"] for b in backend_service.get("backends") or [] if b.get("group")]


def parse_group_health(reports: Iterable[Mapping[str, Any]]) -> list[PoolMember]:
    """``get_health`` answers (as dicts), one per backend group -> one member per node IP.

    A node is healthy when every report that lists it says HEALTHY.
    """
    members: dict[str, PoolMember] = {}
    for report in reports:
        for status in report.get("health_status") or []:
            address = status.get("ip_address") or ""
            if not address:
                continue
            healthy = status.get("health_state") == "HEALTHY"
            if address in members:
                healthy = healthy and bool(members[address].healthy)
            members[address] = PoolMember(address=address, healthy=healthy,
                                          name=_name(status.get("instance") or ""))
    return sorted(members.values(), key=lambda m: m.address)


def message_dict(message: Any) -> dict[str, Any]:
    """A google-cloud-compute (proto-plus) message as a dict with its proto field names."""
    if isinstance(message, Mapping):
        return dict(message)
    result: dict[str, Any] = type(message).to_dict(message)
    return result


class GKEProvider(Provider):
    name = "gke"
    options_help: ClassVar[Mapping[str, str]] = {
        "project": "the cluster's project (env GOOGLE_CLOUD_PROJECT or CLOUDSDK_CORE_PROJECT)",
        "region": "the cluster's region (env GOOGLE_CLOUD_REGION or CLOUDSDK_COMPUTE_REGION)",
    }

    def features(self) -> set[Feature]:
        # LoadBalancerRestart: GKE's service controller runs in the managed control plane.
        return set(Feature) - {Feature.POD_BACKEND_POOL, Feature.LOAD_BALANCER_RESTART}

    def declared(self) -> Declared:
        return self.declared_for("Local")

    def declared_for(self, external_traffic_policy: str) -> Declared:
        idle = {"idle_timeout": "connection tracking idleTimeoutSec: 60 s by default for external "
                                "passthrough NLBs, 600 s for internal ones (Compute API "
                                "BackendServiceConnectionTrackingPolicy); passthrough: an expired "
                                "flow is hashed again, not reset"}
        if external_traffic_policy == "Cluster":
            return Declared(health_check_interval=8.0, healthy_threshold=1, unhealthy_threshold=3,
                            idle_timeout=60.0,
                            notes={"source": _SOURCE, "health_check": "shared, HTTP :10256/healthz, "
                                                                      "timeout 1 s", **idle})
        return Declared(health_check_interval=3.0, healthy_threshold=1, unhealthy_threshold=2,
                        idle_timeout=60.0,
                        notes={"source": _SOURCE, "health_check": "per Service, HTTP healthCheckNodePort "
                                                                  "/healthz, timeout 1 s", **idle})

    def timeouts(self) -> Timeouts:
        # Forwarding rule, backend service, health check and firewall take minutes to program.
        return Timeouts(lb_create=420, lb_propagation=240, lb_delete=420, endpoint_lag=180,
                        health_transition=60, rollout=300, namespace_delete=600, request=10)

    def service_annotations(self) -> dict[str, str]:
        return {RBS_ANNOTATION: "enabled"}

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        compute = import_sdk(self.name, "google.cloud.compute_v1")
        project = self._required("project", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")
        region = self._required("region", "GOOGLE_CLOUD_REGION", "CLOUDSDK_COMPUTE_REGION")
        name = self._backend_service(compute, project, region, service)
        if not name:
            return []
        backend_services = compute.RegionBackendServicesClient()
        backend_service = message_dict(backend_services.get(project=project, region=region,
                                                             backend_service=name))
        reports = [message_dict(backend_services.get_health(
            project=project, region=region, backend_service=name,
            resource_group_reference_resource=compute.ResourceGroupReference(group=group)))
            for group in backend_groups(backend_service)]
        members = parse_group_health(reports)
        names = cluster_nodes(self.api).name_by_ip
        return [PoolMember(m.address, m.healthy, names.get(m.address, m.name)) for m in members]

    def _backend_service(self, compute: Any, project: str, region: str, service: ServiceRef) -> str:
        if self.api is not None:
            svc = self.api.get(f"/api/v1/namespaces/{service.namespace}/services/{service.name}")
            name = svc.get("metadata", {}).get("annotations", {}).get(BACKEND_SERVICE_ANNOTATION, "")
            if name:
                return str(name)
        if not service.ingress:
            return ""
        rules = compute.ForwardingRulesClient().list(
            request={"project": project, "region": region, "filter": f'IPAddress = "{service.ingress}"'})
        return backend_service_from_rules(message_dict(r) for r in rules)

    def _required(self, option: str, *env: str) -> str:
        value = self.option(option, *env)
        if not value:
            raise UsageError(f"the gke provider needs --provider-option {option}=... "
                             f"(or {' or '.join(env)})")
        return value
