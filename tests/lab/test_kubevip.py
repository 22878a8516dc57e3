"""kube-vip in the lab: services mode with ARP, its cloud provider assigning the addresses.

``lab up --lb kube-vip`` boots the lab without the reference LB, applies the cloud provider's
own manifest and the RBAC and DaemonSet kube-vip writes, and hands the VIP range to the cloud
provider. The node that wins the Service's election adds the address to its link, its kernel
answers the client's router's ARP, and when that node dies another one takes the Lease and the
address.
"""

from __future__ import annotations

import pytest

from lbconform.kube.manifests import Applier
from lbconform.kube.tweaks import one_per_node
from lbconform.providers.kubevip import KubeVipProvider
from lbconform_lab import build, upstream
from lbconform_lab import netns as ns
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab
from tests.lab.helpers import (
    answers_through,
    deploy_backend,
    kill_and_time_the_move,
    the_announcing_node,
    wait_for_vip,
)
from tests.lab.test_lifecycle import assert_nothing_left, root_namespace_snapshot

pytestmark = [pytest.mark.lab, pytest.mark.lab_lifecycle, pytest.mark.own_lab]

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
    assert upstream.in_pool_range(vip), f"{vip} is not in the lab's range {upstream.POOL_RANGE}"
    service = api.get(f"/api/v1/namespaces/{namespace}/services/backend")
    assert CLEANUP_FINALIZER in service["metadata"].get("finalizers", []), service["metadata"]

    provider = KubeVipProvider()
    provider.configure(api, {})

    node = the_announcing_node(provider, namespace, state.nodes, VIP_SECONDS)
    answers_through(vip, node, VIP_SECONDS)
    assert vip in addresses(node), f"{node.name} holds the Lease but not {vip}: {addresses(node)}"
    kill_and_time_the_move(no_lab, vip, node, provider.declared().node_failure_window, "kube-vip")
    no_lab.start_node(node.name)
    assert addresses(node) == [node.ip], f"{node.name} came back holding {addresses(node)}"

    assert no_lab.down() is True
    assert_nothing_left(no_lab.dir, before)
