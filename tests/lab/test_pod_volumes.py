"""Lab nodes run pods we did not write: volumes, env sources and the service-account token as the
kubelet gives them, inside a root of the pod's own that leaves the machine unchanged."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from lbconform.kube.manifests import Applier
from lbconform.wait import poll_until
from lbconform_lab import build, machine, topology
from lbconform_lab.cluster import Lab

pytestmark = pytest.mark.lab

NODE = "node-1"
#: The agent reads objects through a 2 s cache and syncs volumes every 2 s (kubelet: about a minute).
UPDATE_SECONDS = 10.0
START_SECONDS = 30.0
#: Where the pod writes a file of its own: inside its root, never on the machine.
WRITES = ("/etc", "/var", "/var/lib", "/run", "/tmp", "/root")

#: Prints every file and variable the pod was given, then whoami from inside, then sleeps.
SCRIPT = """
for f in /cfg/MODE /sec/PASSWORD /info/labels /proj/mode /proj/pw /proj/token-x /empty/ok /host/hello \
         /var/run/secrets/kubernetes.io/serviceaccount/namespace; do
  printf '%s=' "$f"; cat "$f" 2>&1 | tr '\\n' ' '; echo
done
echo "ENV MODE=$MODE S_PASSWORD=$S_PASSWORD KEY=$KEY MEM=$MEM NODE=$NODE_NAME"
echo written > /empty/ok
for d in $WRITES; do echo pod > "$d/lbc-pod-wrote" && echo "WROTE $d"; done
ls /root/.kube 2>/dev/null && echo HOME-KUBECONFIG-VISIBLE
kubectl auth whoami -o json | tr -d '\\n'; echo
echo DONE
sleep 3600
"""


def _pod(namespace: str, host_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "reader", "namespace": namespace, "labels": {"app": "reader"}},
        "spec": {
            "nodeName": NODE, "serviceAccountName": "reader", "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "registry.k8s.io/kubectl:v1.36.3",
                "command": ["sh", "-c", SCRIPT.replace("kubectl", "$KUBECTL")],
                "envFrom": [{"configMapRef": {"name": "settings"}},
                            {"secretRef": {"name": "creds"}, "prefix": "S_"}],
                "env": [{"name": "KEY",
                         "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                           "divisor": "1Mi"}}},
                        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "KUBECTL", "value": str(build.binary("kubectl"))},
                        {"name": "WRITES", "value": " ".join(WRITES)}],
                "resources": {"limits": {"memory": "64Mi"}},
                "volumeMounts": [{"name": v, "mountPath": f"/{v}"}
                                 for v in ("cfg", "sec", "info", "proj", "empty", "host")],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "settings"}},
                {"name": "sec", "secret": {"secretName": "creds"}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                            "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "settings", "items": [{"key": "MODE", "path": "mode"}]}},
                    {"secret": {"name": "creds", "items": [{"key": "PASSWORD", "path": "pw"}]}},
                    {"serviceAccountToken": {"audience": "lbconform-test", "expirationSeconds": 600,
                                             "path": "token-x"}}]}},
                {"name": "empty", "emptyDir": {}},
                {"name": "host", "hostPath": {"path": str(host_dir), "type": "Directory"}},
            ],
        },
    }


def _log(lab: Lab, namespace: str, uid: str) -> str:
    files = sorted((lab.dir.node_dir(NODE) / "logs" / f"{namespace}_reader_{uid}" / "main").glob("*.log"))
    return files[-1].read_text() if files else ""


def _machine_files(lab: Lab) -> dict[str, str]:
    """Path -> size and mtime of what a pod must not change: /etc, /var, /run and $HOME.

    Left out, because other programs write there all the time: /var/log, /var/cache and
    /var/tmp, the lab's own directory and every other lab instance's (a lab beside this one, with
    tests of its own), the record of what labs with real nodes hold of the machine (one beside this
    one writes it as it boots), /run/netns (the labs' namespaces), and the tool directories in
    $HOME (only its own files and ~/.kube, where kubeconfigs live, are read).
    """
    skip = {Path("/var/log"), Path("/var/cache"), Path("/var/tmp"), Path("/run/netns"),
            lab.dir.root.resolve(), machine.RECORD,
            *(Path(topology.lab_dir(n)) for n in range(1, topology.MAX_INSTANCES + 1))}
    home = Path.home()
    roots = [(Path("/etc"), True), (Path("/var"), True), (Path("/run"), True), (home, False),
             (home / ".kube", True)]
    out: dict[str, str] = {}
    for root, deep in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if deep and here / d not in skip
                           and not (here / d).is_mount()]
            for name in [*filenames, *([] if deep else dirnames)]:
                if here / name in skip:
                    continue
                try:
                    st = (here / name).lstat()
                except OSError:
                    continue
                out[str(here / name)] = f"{st.st_size}:{st.st_mtime_ns}"
    return out


def test_a_pod_gets_its_volumes_env_and_token_and_leaves_the_machine_alone(
        lab: Lab, test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    host_dir = lab.dir.node_dir(NODE) / "hostpath-test"
    host_dir.mkdir(exist_ok=True)
    (host_dir / "hello").write_text("from the node")
    before = _machine_files(lab)
    api.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "reader"}})
    api.post(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "settings"},
                                                     "data": {"MODE": "fast"}})
    password = base64.b64encode(b"hunter2").decode()
    api.post(f"/api/v1/namespaces/{ns}/secrets",
             {"metadata": {"name": "creds"}, "data": {"PASSWORD": password}})
    pod = api.post(f"/api/v1/namespaces/{ns}/pods", _pod(ns, host_dir))
    uid = pod["metadata"]["uid"]
    poll_until(lambda: "DONE" in _log(lab, ns, uid), timeout=START_SECONDS, interval=0.2,
               description="the pod to print what it was given")
    out = _log(lab, ns, uid)
    assert "/cfg/MODE=fast" in out and "/sec/PASSWORD=hunter2" in out, out
    assert '/info/labels=app="reader"' in out and "/proj/mode=fast" in out and "/proj/pw=hunter2" in out, out
    assert "/host/hello=from the node" in out and f"serviceaccount/namespace={ns}" in out, out
    assert f"ENV MODE=fast S_PASSWORD=hunter2 KEY=fast MEM=64 NODE={NODE}" in out, out
    assert "HOME-KUBECONFIG-VISIBLE" not in out
    for d in WRITES:
        assert f"WROTE {d}" in out, out  # the pod's root is writable, as a container's is ...
        assert not (Path(d) / "lbc-pod-wrote").exists(), f"the pod wrote into the machine's {d}"
    whoami = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:reader", whoami

    # The audience-bound token is the API server's, for this pod.
    token = out.split("/proj/token-x=", 1)[1].split()[0]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))
    assert claims["aud"] == ["lbconform-test"] and claims["kubernetes.io"]["pod"]["uid"] == uid

    # An update of the ConfigMap reaches the file, as the kubelet's sync does.
    api.patch(f"/api/v1/namespaces/{ns}/configmaps/settings", {"data": {"MODE": "slow"}})
    volume = lab.dir.node_dir(NODE) / "volumes" / uid / "cfg" / "MODE"
    poll_until(lambda: volume.read_text() == "slow", timeout=UPDATE_SECONDS, interval=0.2,
               description="the ConfigMap's update to reach the pod's file")
    assert (host_dir / "hello").read_text() == "from the node"
    api.delete(f"/api/v1/namespaces/{ns}/pods/reader")
    poll_until(lambda: not (lab.dir.node_dir(NODE) / "volumes" / uid).exists(), timeout=START_SECONDS,
               description="the pod's volumes to be removed with it")
    assert _machine_files(lab) == before


def test_a_csi_volume_leaves_the_pod_creating_with_the_reason(lab: Lab, test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    spec = {"nodeName": NODE, "containers": [
        {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53", "args": ["pause"],
         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "csi": {"driver": "ebs.csi.aws.com"}}]}
    api.post(f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "csi"}, "spec": spec})

    def failed_mount() -> str | None:
        events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return next((e["message"] for e in events if e["reason"] == "FailedMount"), None)

    message = poll_until(failed_mount, timeout=START_SECONDS, description="a FailedMount event")
    assert 'volume "data"' in message and "csi" in message and "configMap" in message, message
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/csi")
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert pod["status"]["phase"] == "Pending" and waiting["reason"] == "ContainerCreating", pod["status"]

