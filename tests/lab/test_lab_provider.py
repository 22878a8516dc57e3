"""The lab provider reads the reference LB's pool as a cloud provider plugin reads its API."""

from __future__ import annotations

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier
from lbconform.providers.base import ServiceRef
from lbconform_lab import topology as topo
from lbconform_lab.provider import LabProvider
from tests.lab.helpers import deploy_with_vip, lab_lb

#: Each test makes its own namespace and changes nothing else: it goes on beside the reference runs.
pytestmark = [pytest.mark.lab, pytest.mark.beside_runs]


@pytest.mark.parametrize("mode", ["node", "pod"])
def test_pool_is_nodes_or_ready_pods(test_namespace: Applier, mode: str) -> None:
    ns = test_namespace.namespace
    assert ns
    deploy_with_vip(test_namespace, tweaks.replicas(2), tweaks.one_per_node, lab_lb(mode=mode),
                    healthy=3 if mode == "node" else 2)
    pool = LabProvider().backend_pool(ServiceRef(ns, "backend"))
    if mode == "node":
        want = {n.ip for n in topo.nodes(3)}
    else:
        want = {p["status"]["podIP"] for p in objects.pods(test_namespace.api, ns, "app=backend")}
    assert {m.address for m in pool} == want
    assert all(m.healthy for m in pool)
