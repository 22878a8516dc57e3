"""A backend workload (Deployment or DaemonSet of agnhost) and what suites ask of it.

The suites speak of backends by the names agnhost answers with (its pod name) and by
where they run; this owns reading that from the pods, scaling and rolling, so that no
suite needs the Kubernetes API itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbconform.kube import objects
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import Json


@dataclass
class Workload:
    applier: Applier
    kind: str
    name: str
    selector: str = "app=backend"

    @property
    def namespace(self) -> str:
        assert self.applier.namespace is not None
        return self.applier.namespace

    @property
    def path(self) -> str:
        plural = "deployments" if self.kind == "Deployment" else "daemonsets"
        return f"/apis/apps/v1/namespaces/{self.namespace}/{plural}/{self.name}"

    def pods(self) -> list[Json]:
        """Pods of the workload that are ready and not being deleted."""
        return [p for p in objects.pods(self.applier.api, self.namespace, self.selector)
                if objects.pod_ready(p) and not p["metadata"].get("deletionTimestamp")]

    def names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.pods()}

    def ips(self) -> set[str]:
        return {p["status"]["podIP"] for p in self.pods()}

    def by_node(self) -> dict[str, list[Json]]:
        out: dict[str, list[Json]] = {}
        for p in self.pods():
            out.setdefault(p["spec"]["nodeName"], []).append(p)
        return out

    def wait_rolled_out(self, timeout: float) -> Json:
        if self.kind == "Deployment":
            return objects.wait_for_deployment(self.applier.api, self.namespace, self.name, timeout)
        return objects.wait_for_daemonset(self.applier.api, self.namespace, self.name, timeout)

    def scale(self, replicas: int) -> None:
        self.applier.api.patch(self.path, {"spec": {"replicas": replicas}})

    def delete_pod(self, name: str) -> None:
        self.applier.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
