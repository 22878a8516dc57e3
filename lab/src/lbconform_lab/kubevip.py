"""kube-vip as the lab's load balancer: installed as upstream documents it, then configured.

``lab up --lb kube-vip`` boots the lab without the reference LB. kube-vip-cloud-provider (a
cloud-controller-manager running only the service controller) gives each LoadBalancer Service
an address from the ``kubevip`` ConfigMap's range; kube-vip, in services mode with ARP and an
election per Service (a Lease ``kubevip-<service>`` in the Service's namespace, held by a node),
adds the address to the winning node's interface, sends gratuitous ARP, and writes the ingress
status. What the lab does, and why (docs/lab.md lists it):

- The cloud provider's manifest (``manifest/kube-vip-cloud-controller.yaml`` of its module) is
  applied as upstream ships it.
- kube-vip ships no manifest file: its binary writes its RBAC and DaemonSet (``kube-vip manifest
  rbac`` and ``kube-vip manifest daemonset``), which is how its documentation installs it. The
  lab runs the built binary with the documented flags for services mode, ARP and per-Service
  election on the nodes' ``eth0``, and ``--inCluster`` (without it the DaemonSet mounts the
  host's ``/etc/kubernetes/admin.conf``).
- The ConfigMap ``kube-system/kubevip`` holds ``range-global``: the lab's VIP range, the same
  addresses MetalLB hands out. It is created before anything asks for an address.
- ``lbc-lb`` and the fabric have the VIP range on-link (``network.build``), as for MetalLB: the
  client's router asks by ARP who has a VIP, and the kernel of the node that holds it answers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

from lbconform.errors import LabError
from lbconform.kube.rawapi import Json, RawApi
from lbconform_lab import build
from lbconform_lab.upstream import POOL_RANGE, held_images, kubectl_apply, wait_ready

NAMESPACE: Final = "kube-system"
#: The cloud provider's address pools (its default ConfigMap name and key for every namespace).
CONFIG_MAP: Final = "kubevip"
RANGE_KEY: Final = "range-global"
#: The interface kube-vip adds addresses to and sends ARP from: a lab node's only fabric link.
INTERFACE: Final = "eth0"
#: ``kube-vip manifest daemonset``: services mode, ARP, one election per Service, in-cluster
#: credentials (kube-vip.io/docs/installation/daemonset, "ARP Example for DaemonSet").
DAEMONSET_FLAGS: Final = ("--interface", INTERFACE, "--services", "--servicesElection", "--arp",
                          "--leaderElection", "--inCluster")
DAEMONSET: Final = "kube-vip-ds"
CLOUD_PROVIDER: Final = "kube-vip-cloud-provider"
READY_SECONDS: Final = 120.0

Progress = Callable[[str], None]


def generated(*args: str) -> str:
    """What ``kube-vip manifest ARGS`` writes, with the built binary (no cluster needed)."""
    out = subprocess.run([str(build.binary("kube-vip")), "manifest", *args], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0 or "kind:" not in out.stdout:
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
        raise LabError(f"'kube-vip manifest {' '.join(args)}' failed: {tail}")
    return out.stdout


def config_map() -> Json:
    """The cloud provider's pool: the lab's VIP range, for every namespace."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {RANGE_KEY: POOL_RANGE}}


def install(api: RawApi, kubeconfig: Path, nodes: int, progress: Progress) -> None:
    """Pool, cloud provider, kube-vip: the lab's VIP range is served when this returns."""
    progress(f"kube-vip {build.KUBE_VIP.version}: pool {POOL_RANGE} for its cloud provider")
    api.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", config_map())
    progress(f"kube-vip-cloud-provider {build.KUBE_VIP_CLOUD_PROVIDER.version}: applying upstream's manifest")
    kubectl_apply(kubeconfig, build.KUBE_VIP_CLOUD_PROVIDER_MANIFEST,
                  text=held_images(build.file(build.KUBE_VIP_CLOUD_PROVIDER_MANIFEST).read_text()))
    progress(f"kube-vip: applying the RBAC and DaemonSet it writes (services, ARP on {INTERFACE})")
    kubectl_apply(kubeconfig, "kube-vip's RBAC", text=generated("rbac"))
    kubectl_apply(kubeconfig, "kube-vip's DaemonSet", text=generated("daemonset", *DAEMONSET_FLAGS))
    wait_ready(api, NAMESPACE, CLOUD_PROVIDER, DAEMONSET, nodes,
               f"kube-vip's cloud provider and {nodes} kube-vip pods", READY_SECONDS)
