"""kube-vip in the lab: services mode with ARP, its cloud provider assigning the addresses.

``lab up --lb kube-vip`` boots the lab without the reference LB, applies the cloud provider's
own manifest and the RBAC and DaemonSet kube-vip writes, and hands the VIP range to the cloud
provider. The node that wins the Service's election adds the address to its link, its kernel
answers the client's router's ARP, and when that node dies another one takes the Lease and the
address.
"""

from __future__ import annotations

import time

import pytest

from lbconform.kube.manifests import Applier
from lbconform.kube.tweaks import one_per_node
from lbconform.lab import build, metallb
from lbconform.lab import netns as ns
from lbconform.lab import topology as topo
from lbconform.lab.cluster import Lab
from lbconform.providers.base import ServiceRef
from lbconform.providers.kubevip import KubeVipProvider
from lbconform.wait import poll_until
from tests.lab.helpers import client_get, deploy_backend, wait_for_vip
from tests.lab.test_lifecycle import assert_nothing_left, root_namespace_snapshot
from tests.lab.test_metallb import mac_of, neighbour_mac

pytestmark = [pytest.mark.lab, pytest.mark.lab_lifecycle]

#: The cloud provider assigns, the election runs, the holder writes the status.
VIP_SECONDS = 60.0
CLEANUP_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


def addresses(node: topo.Node) -> list[str]:
    out = ns.ip(node.netns, "-o", "-4", "addr", "show", "dev", "eth0")
    return [line.split(" inet ", 1)[1].split("/")[0] for line in out.splitlines()]


def test_kube_vip_serves_a_vip_by_arp_and_moves_it_when_its_node_dies(no_lab: Lab) -> None:
    """The cloud provider gives the Service an address from the lab's range and holds the
    cleanup finalizer; the client reaches the address through the node that holds the Service's
    Lease; a killed holder's address answers from another node within kube-vip's declared
    failover; the node, started again, holds no stale copy of the address; ``lab down`` leaves
    nothing."""
    if not build.optional_built("kube-vip"):
        pytest.fail("kube-vip is not built: run 'lbconform lab build --with kube-vip'")
    before = root_namespace_snapshot()
    no_lab.up(lb="kube-vip")
    state = no_lab.dir.read()
    assert state.lb == "kube-vip" and "lb" not in state.processes, state
    api = no_lab.api()
    namespace = Applier(api, None).create({"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": "kube-vip-test"}})["metadata"]["name"]
    deploy_backend(Applier(api, namespace), one_per_node)
    vip = wait_for_vip(api, namespace, timeout=VIP_SECONDS)
    assert metallb.in_vip_range(vip), f"{vip} is not in the lab's range {metallb.POOL_RANGE}"
    service = api.get(f"/api/v1/namespaces/{namespace}/services/backend")
    assert CLEANUP_FINALIZER in service["metadata"].get("finalizers", []), service["metadata"]

    provider = KubeVipProvider()
    provider.configure(api, {})

    def holder() -> str:
        pool = provider.backend_pool(ServiceRef(namespace, "backend"))
        return pool[0].name if len(pool) == 1 else ""

    node = topo.node_by_name(poll_until(holder, timeout=VIP_SECONDS, interval=0.2,
                                        description="a node holding the Service's Lease"), state.nodes)
    status, body = poll_until(lambda: client_get(vip, 80, "/hostname"), timeout=VIP_SECONDS, interval=0.2,
                              retry_on=(OSError,), description=f"{vip} to answer the client")
    assert status == 200 and body.startswith("backend-")
    assert vip in addresses(node), f"{node.name} holds the Lease but not {vip}: {addresses(node)}"
    assert neighbour_mac(vip) == mac_of(node.netns, "eth0"), (
        f"the client's router reaches {vip} through another node than the holder {node.name}")

    window = provider.declared().node_failure_window
    no_lab.kill_node(node.name)
    killed = time.monotonic()
    poll_until(lambda: client_get(vip, 80, "/hostname", timeout=0.5)[0] == 200, timeout=2 * window,
               interval=0.1, retry_on=(OSError,), description=f"{vip} to answer again after {node.name} died")
    moved_after = time.monotonic() - killed
    survivors = {mac_of(n.netns, "eth0"): n.name for n in topo.nodes(state.nodes) if n != node}
    assert neighbour_mac(vip) in survivors, f"{vip} answers, but not through a surviving node"
    assert moved_after <= window, (f"{vip} answered again {moved_after:.1f}s after {node.name} died, "
                                   f"beyond kube-vip's declared {window:g}s")
    no_lab.start_node(node.name)
    assert addresses(node) == [node.ip], f"{node.name} came back holding {addresses(node)}"

    assert no_lab.down() is True
    assert_nothing_left(no_lab.dir, before)
