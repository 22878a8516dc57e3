"""The lab as a Kubernetes cluster: nodes, Services through every node, eTP Local health."""

from __future__ import annotations

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier, Tweak, load_one
from lbconform.kube.rawapi import RawApi
from lbconform.wait import await_convergence, poll_until
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab
from lbconform_lab.versions import KUBERNETES_VERSION
from tests.lab.helpers import client_get, deploy_backend, health_check, node_port, pods_by_node

#: Each test makes its own namespace and changes nothing else: it goes on beside the reference runs.
pytestmark = [pytest.mark.lab, pytest.mark.beside_runs]


def test_three_nodes_ready_and_version_tells_the_truth(lab: Lab, kube: RawApi) -> None:
    nodes = kube.get("/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2", "node-3"]
    for n in nodes:
        assert objects.node_condition(kube, n["metadata"]["name"]) == "True"
        assert n["spec"]["podCIDR"].startswith("100.64.")
    assert kube.get("/version")["gitVersion"] == KUBERNETES_VERSION


def test_node_port_reaches_every_pod_through_every_node(test_namespace: Applier) -> None:
    _, svc = deploy_backend(test_namespace, tweaks.one_per_node, tweaks.service_type("NodePort"))
    assert test_namespace.namespace
    by_node = pods_by_node(test_namespace.api, test_namespace.namespace)
    names = {p["metadata"]["name"] for p in by_node.values()}
    assert len(names) == 3
    for node in topo.nodes(3):
        seen: set[str] = set()

        def all_answered(node: topo.Node = node, seen: set[str] = seen) -> bool:
            status, body = client_get(node.ip, node_port(svc), "/hostname")
            assert status == 200
            seen.add(body.strip())
            return seen == names

        poll_until(all_answered, timeout=30, interval=0.02,
                   description=f"every pod to answer through {node.name}'s NodePort")


def test_local_policy_health_check_and_client_ip(test_namespace: Applier) -> None:
    _, svc = deploy_backend(test_namespace, tweaks.replicas(2), tweaks.one_per_node,
                            tweaks.traffic_policy_local)
    assert test_namespace.namespace
    hc_port = int(svc["spec"]["healthCheckNodePort"])
    with_pod = pods_by_node(test_namespace.api, test_namespace.namespace)
    assert len(with_pod) == 2
    for node in topo.nodes(3):
        local = node.name in with_pod
        want = (200, 1) if local else (503, 0)

        def as_expected(node: topo.Node = node, want: tuple[int, int] = want) -> bool:
            status, body = health_check(node, hc_port)
            assert body["service"] == {"namespace": test_namespace.namespace, "name": "backend"}
            assert body["serviceProxyHealthy"] is True
            return (status, body["localEndpoints"]) == want

        # kube-proxy programs its health server a sync period after the slice changes.
        await_convergence(as_expected, successes=3, timeout=15,
                          description=f"{node.name}'s health check to answer {want}")
        if local:
            status, text = client_get(node.ip, node_port(svc), "/clientip")
            assert status == 200
            assert text.rsplit(":", 1)[0] == topo.CLIENT_IP


def test_unknown_image_fails_the_pod_with_a_reason(test_namespace: Applier) -> None:
    pod = load_one("backend-deployment", tweaks.image("docker.io/library/busybox:1.36"))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unknown-image"},
           "spec": pod["spec"]["template"]["spec"]}
    test_namespace.create(pod)
    api, ns = test_namespace.api, test_namespace.namespace

    def waiting() -> dict[str, str] | None:
        st = api.get(f"/api/v1/namespaces/{ns}/pods/unknown-image").get("status", {})
        for c in st.get("containerStatuses") or []:
            w = c.get("state", {}).get("waiting")
            if w and w.get("reason") == "ErrImagePull":
                return dict(w)
        return None

    reason = poll_until(waiting, timeout=30, description="the pod to report ErrImagePull")
    assert "busybox" in reason["message"]
    assert "registry.k8s.io/e2e-test-images/agnhost" in reason["message"]


#: A container killed for its liveness probe, in the kubelet's words (its "Killing" event).
LIVENESS_KILL = "failed liveness probe, will be restarted"


@pytest.mark.parametrize(("tweak", "by_liveness"), [
    (tweaks.liveness_exec(["false"]), True),
    # The wrong manifest that tells the check apart: a container that exits on its own also restarts.
    (tweaks.container_args(["no-such-subcommand"]), False),
], ids=["failing-liveness-probe", "exits-on-its-own"])
def test_liveness_failure_restarts_the_container(test_namespace: Applier, tweak: Tweak,
                                                 by_liveness: bool) -> None:
    """A container whose liveness probe fails is killed for it and restarted; one that exits on its
    own restarts without that reason."""
    test_namespace.create(load_one("backend-deployment", tweaks.replicas(1), tweak))
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns

    def restarted() -> bool:
        return any(c.get("restartCount", 0) >= 1 for p in objects.pods(api, ns, "app=backend")
                   for c in p.get("status", {}).get("containerStatuses") or [])

    poll_until(restarted, timeout=40, description="the container's first restart")
    events = api.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
    kills = [e for e in events if e.get("reason") == "Killing" and LIVENESS_KILL in e.get("message", "")]
    assert bool(kills) is by_liveness, [(e.get("reason"), e.get("message")) for e in events]


def test_host_network_daemonset_with_field_ref_env(test_namespace: Applier) -> None:
    deploy_backend(
        test_namespace, tweaks.host_network, tweaks.env("NODE_NAME", field_path="spec.nodeName"),
        tweaks.env("MY_POD_IP", field_path="status.podIP"), tweaks.service_type("NodePort"),
        _netexec_port(18080), kind="daemonset",
    )
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    by_node = pods_by_node(api, ns)
    assert sorted(by_node) == ["node-1", "node-2", "node-3"]
    for node in topo.nodes(3):
        assert by_node[node.name]["status"]["podIP"] == node.ip
        status, body = client_get(node.ip, 18080, "/shell?cmd=echo%20$NODE_NAME-$MY_POD_IP")
        assert status == 200
        assert f"{node.name}-{node.ip}" in body
        assert client_get(node.ip, 18080, "/hostname") == (200, node.name)


def _netexec_port(port: int) -> tweaks.Tweak:
    def tweak(obj: dict) -> None:  # type: ignore[type-arg]
        if obj["kind"] in ("DaemonSet", "Deployment"):
            c = obj["spec"]["template"]["spec"]["containers"][0]
            c["args"] = ["netexec", f"--http-port={port}"]
            c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]

    return tweak


def test_startup_tcp_and_exec_readiness_probes(test_namespace: Applier) -> None:
    def probes(obj: dict) -> None:  # type: ignore[type-arg]
        c = obj["spec"]["template"]["spec"]["containers"][0]
        c["startupProbe"] = {"tcpSocket": {"port": "http"}, "periodSeconds": 1, "failureThreshold": 30}
        c["readinessProbe"] = {"exec": {"command": ["sh", "-c", "test -n \"$MY_POD_IP\""]},
                               "periodSeconds": 1}

    test_namespace.create(load_one("backend-deployment", tweaks.replicas(1),
                                   tweaks.env("MY_POD_IP", field_path="status.podIP"), probes))
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    objects.wait_for_deployment(api, ns, "backend")
    (pod,) = objects.pods(api, ns, "app=backend")
    (status,) = pod["status"]["containerStatuses"]
    assert status["started"] is True and status["ready"] is True
