"""What the lab shares for the load balancers it installs as upstream ships them (MetalLB,
kube-vip): the addresses they may hand out, ``kubectl apply`` of their manifests (with nothing
to pull: ``held_images``), and the wait for their workloads, which names every pod that is not
Ready when it gives up."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import Final

import yaml

from lbconform.errors import LabError
from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.wait import NotYet, poll_until
from lbconform_lab import build
from lbconform_lab import topology as topo

#: The addresses a third-party LB hands out: inside the lab's VIP range, as the reference LB's are,
#: below the addresses held for requests (``topology.REQUEST_RANGE``).
POOL_RANGE: Final = "198.18.0.10-198.18.0.239"


def in_pool_range(address: str) -> bool:
    """Whether ``address`` is one a third-party LB may hand out in the lab."""
    first, last = (ipaddress.IPv4Address(a) for a in POOL_RANGE.split("-"))
    ip = ipaddress.IPv4Address(address)
    return first <= ip <= last and ip in ipaddress.ip_network(topo.VIP_CIDR)


def held_images(manifest: str) -> str:
    """The manifest with each container's ``imagePullPolicy: Always`` made ``IfNotPresent``, as an
    air-gapped cluster's install does: the lab has no registry, its nodes hold the images
    (``images``), and a pull that must happen fails (kube-vip's cloud provider asks for one)."""
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    for doc in docs:
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
            if c.get("imagePullPolicy") == "Always":
                c["imagePullPolicy"] = "IfNotPresent"
    return yaml.safe_dump_all(docs, sort_keys=False)


def kubectl_apply(kubeconfig: Path, what: str, *, path: Path | None = None, text: str | None = None) -> None:
    """``kubectl apply --server-side`` of a manifest file, or of YAML text, with the lab's kubectl."""
    argv = [str(build.binary("kubectl")), f"--kubeconfig={kubeconfig}", "apply", "--server-side",
            "-f", str(path) if path else "-"]
    out = subprocess.run(argv, input=text, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
        raise LabError(f"applying {what} failed: {tail}")


def wait_ready(api: RawApi, namespace: str, deployment: str, daemonset: str, nodes: int, what: str,
               timeout: float) -> None:
    """``deployment`` Available and ``daemonset`` Ready on each of ``nodes`` nodes."""
    base = f"/apis/apps/v1/namespaces/{namespace}"

    def ready() -> bool | NotYet:
        controller = api.get(f"{base}/deployments/{deployment}").get("status", {})
        daemons = api.get(f"{base}/daemonsets/{daemonset}").get("status", {})
        if controller.get("availableReplicas", 0) >= 1 and daemons.get("numberReady", 0) == nodes:
            return True
        return NotYet(f"{deployment} available {controller.get('availableReplicas', 0)}, "
                      f"{daemonset} ready {daemons.get('numberReady', 0)} of {nodes}; "
                      f"{not_ready_pods(api, namespace)}")

    poll_until(ready, timeout=timeout, interval=0.5, retry_on=(ApiError, OSError),
               description=f"{what} to be Ready")


def not_ready_pods(api: RawApi, namespace: str) -> str:
    """The pods of ``namespace`` that are not Ready, each with its node, phase, restarts and
    waiting reason."""
    out = []
    for pod in api.get(f"/api/v1/namespaces/{namespace}/pods").get("items", []):
        status = pod.get("status", {})
        if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
            continue
        containers = status.get("containerStatuses") or [{}]
        waiting = (containers[0].get("state") or {}).get("waiting", {}).get("reason", "")
        out.append(f"{pod['metadata']['name']} on {pod['spec'].get('nodeName', '?')}: "
                   f"{status.get('phase', '?')}, {containers[0].get('restartCount', 0)} restarts"
                   + (f", {waiting}" if waiting else ""))
    return "; ".join(out) or "every pod Ready"
