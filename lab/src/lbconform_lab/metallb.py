"""MetalLB as the lab's load balancer: installed from upstream's own manifest, then configured.

``lab up --lb metallb`` boots the lab without the reference LB and hands the VIP range to
MetalLB in layer-2 mode. What the lab changes to make that work, and why (docs/lab.md lists it):

- Nothing in ``metallb-native.yaml``: it is applied as upstream ships it (CRDs, RBAC, the
  webhook, the controller Deployment, the speaker DaemonSet), with the lab's kubectl.
- The apiserver routes webhook calls to the endpoint's pod IP (``--enable-aggregator-routing``):
  it lives in the fabric namespace, where no kube-proxy makes ClusterIPs reachable
  (``controlplane.apiserver_args``).
- ``lbc-lb`` is a plain router whose VIP range is on-link on the fabric (``network.build``),
  so it asks by ARP who has a VIP and the announcing speaker answers.
- The L2Advertisement names ``eth0``: a lab node's pod veths are ``lv*``, which MetalLB's
  default exclusion list (written for real CNIs' ``veth*``, ``cali*``) does not cover.

The order matters: the webhook (failurePolicy Fail) admits the pool only once the controller
is Ready, and the controller is Ready only once its certificate rotation has injected the CA.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from lbconform.kube.rawapi import ApiError, Json, RawApi
from lbconform.wait import poll_until
from lbconform_lab import build
from lbconform_lab import topology as topo
from lbconform_lab.upstream import POOL_RANGE, kubectl_apply, wait_ready

NAMESPACE: Final = "metallb-system"
#: The addresses MetalLB hands out: inside the lab's VIP range, as the reference LB's are.
POOL_NAME: Final = "lab-pool"
#: The addresses held for Services that ask for one: never handed out unasked (``autoAssign: false``).
REQUEST_POOL_NAME: Final = "lab-requested"
ADVERTISEMENT_NAME: Final = "lab-l2"
#: The one interface of a lab node on the fabric, where the client's router asks for VIPs.
ANNOUNCE_INTERFACE: Final = "eth0"
#: Time for the controller to rotate its certificates and become Ready, and for every speaker.
READY_SECONDS: Final = 120.0
#: Time for the webhook to admit the pool once the controller is Ready (endpoint propagation).
CONFIGURE_SECONDS: Final = 30.0
GROUP: Final = "metallb.io/v1beta1"

Progress = Callable[[str], None]


def configuration() -> list[tuple[str, Json]]:
    """The lab's IPAddressPools (one handed out, one held for requests) and L2Advertisement, each
    with the collection it is created in."""
    base = f"/apis/{GROUP}/namespaces/{NAMESPACE}"
    pool: Json = {"apiVersion": GROUP, "kind": "IPAddressPool",
                  "metadata": {"name": POOL_NAME, "namespace": NAMESPACE},
                  "spec": {"addresses": [POOL_RANGE]}}
    requested: Json = {"apiVersion": GROUP, "kind": "IPAddressPool",
                       "metadata": {"name": REQUEST_POOL_NAME, "namespace": NAMESPACE},
                       "spec": {"addresses": [topo.REQUEST_RANGE], "autoAssign": False}}
    l2: Json = {"apiVersion": GROUP, "kind": "L2Advertisement",
                "metadata": {"name": ADVERTISEMENT_NAME, "namespace": NAMESPACE},
                "spec": {"ipAddressPools": [POOL_NAME, REQUEST_POOL_NAME],
                         "interfaces": [ANNOUNCE_INTERFACE]}}
    return [(f"{base}/ipaddresspools", pool), (f"{base}/ipaddresspools", requested),
            (f"{base}/l2advertisements", l2)]


def configure(api: RawApi, timeout: float = CONFIGURE_SECONDS) -> None:
    """Create the pool and the advertisement; the webhook may refuse until its endpoint is known."""
    for collection, obj in configuration():
        def created(collection: str = collection, obj: Json = obj) -> bool:
            try:
                api.post(collection, obj)
            except ApiError as exc:
                if exc.status != 409:  # 409: made by an earlier try whose answer was lost
                    raise
            return True

        poll_until(created, timeout=timeout, interval=0.5, retry_on=(ApiError, OSError),
                   description=f"MetalLB's webhook to admit {obj['kind']} {obj['metadata']['name']}")


def install(api: RawApi, kubeconfig: Path, nodes: int, progress: Progress) -> None:
    """Apply, wait, configure: MetalLB serves the lab's VIP range when this returns."""
    progress(f"MetalLB {build.METALLB.version}: applying upstream's manifest")
    kubectl_apply(kubeconfig, build.METALLB_MANIFEST, path=build.file(build.METALLB_MANIFEST))
    progress("MetalLB: waiting for the controller (certificate rotation) and the speakers")
    wait_ready(api, NAMESPACE, "controller", "speaker", nodes,
               f"MetalLB's controller and {nodes} speakers", READY_SECONDS)
    progress(f"MetalLB: pool {POOL_RANGE} announced on {ANNOUNCE_INTERFACE} (layer 2)")
    configure(api)
