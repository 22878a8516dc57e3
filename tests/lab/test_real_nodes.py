"""Real nodes (``lab up --node-runtime containerd``): each node runs the kubelet and containerd,
which run its pods with runc from images the lab built (agnhost, the quiet backend's python,
kubectl in cluster), on the CNI plugins' network; the kubelet serves its own API; a node killed is
a power cut and a node started is a boot; a kube-proxy restarted comes back (the chaos
experiments' hooks); ``lab down``, and a boot stopped while its nodes start, leave nothing on the
machine (sysctls, cgroups and mounts included)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import RawApi
from lbconform.kube.workload import QUIET_KIND
from lbconform.wait import poll_until
from lbconform_lab import build, images, machine, versions
from lbconform_lab import topology as topo
from lbconform_lab.cluster import CONTAINERD, Lab
from lbconform_lab.provider import LabNodes
from tests.lab.helpers import client_get, deploy_backend, pods_by_node, wait_for_vip
from tests.lab.test_interrupt import stop_boot
from tests.lab.test_lifecycle import assert_nothing_left, cli, one_line_error, root_namespace_snapshot

pytestmark = [pytest.mark.lab, pytest.mark.lab_lifecycle, pytest.mark.own_lab]

NODES = 2
#: The kubelet starts a killed node's pod again within this of the node's start (a sandbox and a
#: container, the readiness probe's first pass).
POD_BACK_SECONDS = 60.0
#: How far into the nodes' step the boot is stopped: the kubelet's sysctls set, every node's
#: namespaces, mounts and containerd up, the images being imported into them.
INTO_NODES_SECONDS = 2.0
#: The repositories of the images each upstream load balancer's pods name.
UPSTREAM_IMAGES = {"metallb": ("quay.io/metallb/controller", "quay.io/metallb/speaker"),
                   "kube-vip": ("ghcr.io/kube-vip/kube-vip", "ghcr.io/kube-vip/kube-vip-cloud-provider")}
#: A Service's address from an announcing implementation, once its pods run.
LB_ADDRESS_SECONDS = 60.0
NAMESPACE = "real-nodes"
QUIET_NAMESPACE = "real-nodes-quiet"


def kubectl(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(build.binary("kubectl")), f"--kubeconfig={lab.dir.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def pod_phase(api: RawApi, name: str) -> str:
    return str(api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}").get("status", {}).get("phase", ""))


def answering(vip: str, want: set[str]) -> bool:
    seen = set()
    for _ in range(20):
        try:
            status, body = client_get(vip, 80, "/hostname", timeout=2)
        except OSError:
            continue
        if status == 200:
            seen.add(body)
    return seen == want


def test_real_nodes_run_the_labs_images_serve_the_kubelet_api_and_die_as_machines(no_lab: Lab) -> None:
    before = root_namespace_snapshot()
    no_lab.up(node_count=NODES, node_runtime=CONTAINERD)
    api = no_lab.api()
    for node in api.get("/api/v1/nodes")["items"]:
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == versions.KUBERNETES_VERSION, info
        runtime = f"containerd://{versions.CONTAINERD_VERSION.lstrip('v')}"
        assert info["containerRuntimeVersion"] == runtime, info

    api.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    ns = Applier(api, NAMESPACE)
    deploy_backend(ns, tweaks.replicas(NODES), tweaks.one_per_node)
    vip = wait_for_vip(api, NAMESPACE)
    pods = pods_by_node(api, NAMESPACE)
    names = {p["metadata"]["name"] for p in pods.values()}
    poll_until(lambda: answering(vip, names), timeout=30, interval=0.5,
               description=f"both pods to answer through {vip}")

    # Each pod is a runc container of the lab's agnhost image: its own hostname and interfaces,
    # upstream's tools; the kubelet serves exec and logs.
    name = sorted(names)[0]
    hostname = kubectl(no_lab, "exec", "-n", NAMESPACE, name, "--", "cat", "/etc/hostname")
    assert (hostname.returncode, hostname.stdout) == (0, f"{name}\n"), hostname.stderr
    interfaces = kubectl(no_lab, "exec", "-n", NAMESPACE, name, "--", "ls", "/sys/class/net")
    assert interfaces.stdout.split() == ["eth0", "lo"], interfaces.stderr
    nc = kubectl(no_lab, "exec", "-n", NAMESPACE, name, "--", "nc", "-z", "-w", "2", "127.0.0.1", "8080")
    assert nc.returncode == 0, nc.stderr
    logs = kubectl(no_lab, "logs", "-n", NAMESPACE, name)
    assert "Started HTTP server on port 8080" in logs.stdout, logs.stderr
    pod = objects.pods(api, NAMESPACE, "app=backend")[0]
    assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    listed = cli("lab", "crictl", pod["spec"]["nodeName"], "ps", "-o", "json")
    assert listed.returncode == 0 and '"netexec"' in listed.stdout, listed.stderr
    assert "no lab node named 'node-9'" in one_line_error(cli("lab", "crictl", "node-9", "ps"))

    # The quiet backend: the lab's python image runs manifests/quiet-server.py from its ConfigMap.
    api.post("/api/v1/namespaces", {"metadata": {"name": QUIET_NAMESPACE}})
    deploy_backend(Applier(api, QUIET_NAMESPACE), tweaks.replicas(NODES), tweaks.one_per_node,
                   kind=QUIET_KIND)
    quiet_vip = wait_for_vip(api, QUIET_NAMESPACE)
    quiet_names = {p["metadata"]["name"] for p in pods_by_node(api, QUIET_NAMESPACE).values()}
    poll_until(lambda: answering(quiet_vip, quiet_names), timeout=30, interval=0.5,
               description=f"both quiet backends to answer through {quiet_vip}")
    version = kubectl(no_lab, "exec", "-n", QUIET_NAMESPACE, sorted(quiet_names)[0], "--", "python3", "-c",
                      "import ssl, sqlite3, platform; print(platform.python_version())")
    assert version.stdout.startswith("3.11."), version.stderr

    # The kubectl image, in cluster: its service account's token, the apiserver through the
    # kubernetes Service.
    ns.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whoami"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "kubectl", "image": images.KUBECTL,
                   "args": ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]}]}})
    poll_until(lambda: pod_phase(api, "whoami") in ("Succeeded", "Failed"), timeout=POD_BACK_SECONDS,
               interval=0.5, description="the kubectl pod to end")
    whoami = kubectl(no_lab, "logs", "-n", NAMESPACE, "whoami")
    assert pod_phase(api, "whoami") == "Succeeded", whoami.stdout + whoami.stderr
    assert whoami.stdout == f"system:serviceaccount:{NAMESPACE}:default", whoami.stderr

    # An image the lab does not hold is not pulled from anywhere.
    ns.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unknown-image"},
               "spec": {"containers": [{"name": "c", "image": "registry.example/none:1"}]}})

    def pull_failed() -> str:
        status = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/unknown-image").get("status", {})
        waiting = ((status.get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason", ""))
        return reason if reason in ("ErrImagePull", "ImagePullBackOff") else ""

    poll_until(pull_failed, timeout=30, interval=0.5, description="the unknown image's pull to fail")

    # A power cut: nothing of the node runs; its start is a boot, and the kubelet starts its pod
    # again (a new sandbox: a new address).
    node = topo.Node(NODES)
    victim = pods_by_node(api, NAMESPACE)[node.name]
    no_lab.kill_node(node.name)
    assert machine.pids_in(machine.node_cgroup(node)) == set()
    no_lab.start_node(node.name)

    def back() -> bool:
        p = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{victim['metadata']['name']}")
        statuses = p["status"].get("containerStatuses") or [{}]
        return bool(statuses[0].get("ready")) and statuses[0].get("restartCount", 0) >= 1 \
            and p["status"].get("podIP") != victim["status"]["podIP"]

    poll_until(back, timeout=POD_BACK_SECONDS, interval=0.5, description="the killed node's pod to run again")
    poll_until(lambda: answering(vip, names), timeout=30, interval=0.5,
               description=f"both pods to answer through {vip} again")

    # The chaos experiments' hooks: a kube-proxy restarted answers again and the Service serves;
    # a node that runs is not started twice.
    first = topo.Node(1).name
    before_restart = no_lab.dir.read().processes[f"kube-proxy-{first}"].pid
    LabNodes().restart_kube_proxy(first)
    assert no_lab.dir.read().processes[f"kube-proxy-{first}"].pid != before_restart
    LabNodes().start_node(first)
    poll_until(lambda: answering(vip, names), timeout=30, interval=0.5,
               description=f"both pods to answer through {vip} after kube-proxy's restart")

    no_lab.down()
    assert_nothing_left(no_lab.dir, before)


def test_a_boot_stopped_while_real_nodes_start_leaves_nothing(no_lab: Lab) -> None:
    before = root_namespace_snapshot()
    argv = [sys.executable, "-m", "lbconform.cli", "lab", "up", "--nodes", str(NODES),
            "--node-runtime", CONTAINERD]
    code, err, took = stop_boot(argv, "nodes", signal.SIGINT, later=INTO_NODES_SECONDS)
    assert code == 130 and "lbconform: stopped by SIGINT" in err, err
    assert_nothing_left(no_lab.dir, before)
    print(f"stopped {took:.1f}s after SIGINT")


@pytest.mark.parametrize("lb", ["metallb", "kube-vip"])
def test_upstreams_load_balancers_run_from_the_labs_images_on_real_nodes(no_lab: Lab, lb: str) -> None:
    """MetalLB's controller and speakers, kube-vip and its cloud provider: upstream's manifests, the
    images the lab built under upstream's references, a Service's address announced and served."""
    if not build.optional_built(lb):
        pytest.skip(f"{lb} is not built: 'lbconform lab build --with {lb}' (make setup builds it)")
    before = root_namespace_snapshot()
    no_lab.up(node_count=NODES, node_runtime=CONTAINERD, lb=lb)
    api = no_lab.api()
    running = {c["image"] for p in api.get("/api/v1/pods")["items"] for c in p["spec"]["containers"]
               if p["metadata"]["namespace"] != NAMESPACE}
    assert {i.rpartition(":")[0] for i in running} >= set(UPSTREAM_IMAGES[lb]), running
    api.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    deploy_backend(Applier(api, NAMESPACE), tweaks.replicas(NODES), tweaks.one_per_node)
    vip = wait_for_vip(api, NAMESPACE, timeout=LB_ADDRESS_SECONDS)
    names = {p["metadata"]["name"] for p in pods_by_node(api, NAMESPACE).values()}
    poll_until(lambda: answering(vip, names), timeout=30, interval=0.5,
               description=f"both pods to answer through {vip}, announced by {lb}")
    no_lab.down()
    assert_nothing_left(no_lab.dir, before)
