"""The Service jig against the lab: create, wait, update, and what it says when it fails."""

from __future__ import annotations

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.jig import LoadBalancerTimeout, ServiceJig
from lbconform.kube.manifests import Applier, load_one

#: Each test makes its own namespace and changes nothing else: it goes on beside the reference runs.
pytestmark = [pytest.mark.lab, pytest.mark.beside_runs]


def test_jig_waits_updates_and_describes(test_namespace: Applier) -> None:
    assert test_namespace.namespace
    test_namespace.create(load_one("backend-deployment", tweaks.replicas(1)))
    objects.wait_for_deployment(test_namespace.api, test_namespace.namespace, "backend")
    jig = ServiceJig(test_namespace)
    jig.create(tweaks.traffic_policy_local)
    vip = jig.wait_for_load_balancer(timeout=10)
    assert vip.startswith("198.18.0.")
    jig.update(lambda svc: svc["spec"].update(externalTrafficPolicy="Cluster"))
    assert jig.get()["spec"]["externalTrafficPolicy"] == "Cluster"
    info = jig.diagnostics()
    assert info["service"]["metadata"]["name"] == "backend"
    assert len(info["pods"]) == 1 and info["pods"][0]["ready"]
    assert info["endpointslices"] and any("EnsuringLoadBalancer" in e for e in info["events"])


def test_a_service_no_lb_serves_times_out_with_the_timeout_named(test_namespace: Applier) -> None:
    jig = ServiceJig(test_namespace)
    jig.create(lambda svc: svc["spec"].update(loadBalancerClass="example.com/none"))
    with pytest.raises(LoadBalancerTimeout) as failure:
        jig.wait_for_load_balancer(timeout=2, timeout_name="lb_create")
    assert "lb_create=2s" in str(failure.value) and '"type": "LoadBalancer"' in str(failure.value)
