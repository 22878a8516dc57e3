"""The Node object's side of the agent: registration, status, Lease heartbeats, pod routes.

Routes: once the real node IPAM controller has given this node its podCIDR, the agent
announces it, as a routing daemon would, by pointing a route at its node IP in every other
namespace of the lab (fabric, load balancer, the other nodes).
"""

from __future__ import annotations

import datetime as dt
import logging
import platform
import threading
from typing import Any

from lbconform.kube.rawapi import MERGE, ApiError, Json, RawApi
from lbconform.wait import poll_until
from lbconform_lab import netns as ns
from lbconform_lab import topology as topo
from lbconform_lab.controlplane import (
    KUBELET_PORT,
    NODE_LEASE_DURATION_SECONDS,
    NODE_LEASE_RENEW_SECONDS,
)
from lbconform_lab.versions import KUBERNETES_VERSION

log = logging.getLogger(__name__)

#: The node reports its full status this often (the kubelet's nodeStatusReportFrequency is 5 min;
#: the Lease is the heartbeat in between).
STATUS_REPORT_SECONDS = 30.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeHeart:
    """Registers the Node, keeps its Lease and status fresh."""

    def __init__(self, api: RawApi, node: topo.Node) -> None:
        self.api = api
        self.node = node
        self.stopped = threading.Event()
        self._ready_since = _now()

    def _status(self) -> dict[str, Any]:
        now = _now()

        def cond(kind: str, status: str, reason: str, message: str) -> Json:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": self._ready_since}

        return {
            "addresses": [{"type": "InternalIP", "address": self.node.ip},
                          {"type": "Hostname", "address": self.node.name}],
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "lab node"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "lab node"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "lab node"),
                cond("Ready", "True", "KubeletReady", "lbconform lab node agent is posting ready status"),
            ],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                "osImage": "lbconform lab", "containerRuntimeVersion": "lab://1",
                "kubeletVersion": KUBERNETES_VERSION, "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64",
            },
            # Where the apiserver finds this node's kubelet API (lab-kubelet) on its InternalIP.
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        }

    def register(self) -> Json:
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node.name, "labels": {
                "kubernetes.io/hostname": self.node.name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"}},
            "spec": {},
        }
        try:
            self.api.post("/api/v1/nodes", body)
            log.info("registered node %s", self.node.name)
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.info("node %s already registered", self.node.name)
        self.post_status()
        return self.api.get(f"/api/v1/nodes/{self.node.name}")

    def post_status(self) -> None:
        self.api.patch(f"/api/v1/nodes/{self.node.name}/status", {"status": self._status()})

    def wait_for_pod_cidr(self, timeout: float) -> str:
        def cidr() -> str | None:
            spec = self.api.get(f"/api/v1/nodes/{self.node.name}").get("spec", {})
            cidr: str | None = spec.get("podCIDR")
            return cidr

        return poll_until(cidr, timeout=timeout, interval=0.2,
                          description=f"podCIDR of {self.node.name} from node IPAM")

    def renew_lease(self, node_uid: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node.name}"
        spec = {"holderIdentity": self.node.name, "renewTime": _micro_now(),
                "leaseDurationSeconds": NODE_LEASE_DURATION_SECONDS}
        try:
            self.api.patch(path, {"spec": spec}, MERGE)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.api.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node.name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": self.node.name, "uid": node_uid}]},
                "spec": spec,
            })

    def heartbeat_forever(self, node_uid: str) -> None:
        since_status = 0.0
        while not self.stopped.wait(NODE_LEASE_RENEW_SECONDS):
            try:
                self.renew_lease(node_uid)
                since_status += NODE_LEASE_RENEW_SECONDS
                if since_status >= STATUS_REPORT_SECONDS:
                    self.post_status()
                    since_status = 0.0
            except Exception as exc:
                log.warning("heartbeat of %s failed: %s", self.node.name, exc)


def announce_pod_cidr(node: topo.Node, pod_cidr: str, peers: list[str]) -> None:
    """Route this node's podCIDR via its node IP in every other lab namespace."""
    for peer in peers:
        if peer != node.netns:
            ns.route_replace(peer, pod_cidr, "via", node.ip)
