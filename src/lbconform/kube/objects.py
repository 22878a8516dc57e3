"""Reading workload state: pods, EndpointSlices, nodes, and waiting for rollouts."""

from __future__ import annotations

from typing import Any

from lbconform.kube.rawapi import Json, RawApi
from lbconform.wait import poll_until

#: A Deployment or DaemonSet of the lab's backends must be fully available within this.
ROLLOUT_TIMEOUT_SECONDS = 90.0
#: A node started again runs its DaemonSets' pods, Ready, within this of its own Ready.
NODE_PODS_READY_SECONDS = 180.0


def pods(api: RawApi, namespace: str, selector: str) -> list[Json]:
    items: list[Json] = api.get(f"/api/v1/namespaces/{namespace}/pods",
                                labelSelector=selector).get("items", [])
    return items


def pod_ready(pod: Json) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


def endpoint_slices(api: RawApi, namespace: str, service: str) -> list[Json]:
    items: list[Json] = api.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
        labelSelector=f"kubernetes.io/service-name={service}").get("items", [])
    return items


def endpoints(api: RawApi, namespace: str, service: str) -> dict[str, dict[str, Any]]:
    """Endpoint address -> its conditions and node, across the Service's slices."""
    out: dict[str, dict[str, Any]] = {}
    for s in endpoint_slices(api, namespace, service):
        for ep in s.get("endpoints") or []:
            for addr in ep.get("addresses", []):
                out[addr] = {**ep.get("conditions", {}), "nodeName": ep.get("nodeName")}
    return out


def node_condition(api: RawApi, name: str, kind: str = "Ready") -> str:
    node = api.get(f"/api/v1/nodes/{name}")
    return next((c["status"] for c in node.get("status", {}).get("conditions", [])
                 if c["type"] == kind), "absent")


def wait_for_deployment(api: RawApi, namespace: str, name: str,
                        timeout: float = ROLLOUT_TIMEOUT_SECONDS) -> Json:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"

    def done() -> Json | None:
        d = api.get(path)
        st, want = d.get("status", {}), d["spec"].get("replicas", 1)
        ok = (st.get("observedGeneration", 0) >= d["metadata"]["generation"]
              and st.get("updatedReplicas", 0) == want and st.get("availableReplicas", 0) == want
              and st.get("replicas", 0) == want)
        return d if ok else None

    return poll_until(done, timeout=timeout, interval=0.2,
                      description=f"deployment {namespace}/{name} to be available")


def wait_for_daemonset(api: RawApi, namespace: str, name: str,
                       timeout: float = ROLLOUT_TIMEOUT_SECONDS) -> Json:
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"

    def done() -> Json | None:
        d = api.get(path)
        st = d.get("status", {})
        want = st.get("desiredNumberScheduled", -1)
        ok = (st.get("observedGeneration", 0) >= d["metadata"]["generation"] and want > 0
              and st.get("numberReady", 0) == want and st.get("updatedNumberScheduled", 0) == want)
        return d if ok else None

    return poll_until(done, timeout=timeout, interval=0.2,
                      description=f"daemonset {namespace}/{name} to be ready on every node")


def node_daemon_pods(api: RawApi, node: str) -> list[Json]:
    """The pods DaemonSets run on ``node`` (kube-proxy where it is one, and an implementation's
    per-node agents: MetalLB's speakers, kube-vip's), in every namespace."""
    items: list[Json] = api.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node}").get("items", [])
    return [p for p in items
            if any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]


def wait_for_node_daemon_pods(api: RawApi, node: str, timeout: float = NODE_PODS_READY_SECONDS) -> None:
    """Wait until every DaemonSet pod on ``node`` (but those going away) is Ready: a node whose
    machine came back is whole again only once its per-node agents run, and an implementation
    that elects a node to announce an address may elect one whose agent is not up yet."""
    def whole() -> bool:
        return all(pod_ready(p) for p in node_daemon_pods(api, node)
                   if not p["metadata"].get("deletionTimestamp"))

    poll_until(whole, timeout=timeout, interval=1.0,
               description=f"the DaemonSet pods on node {node} to be Ready again")
