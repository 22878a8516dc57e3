"""Pod termination as the kubelet does it, observed from outside: the ordering the
graceful-termination suites will measure (preStop, then SIGTERM, SIGKILL at the grace
period) and what EndpointSlices and kube-proxy's health check show meanwhile."""

from __future__ import annotations

import time

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.wait import await_convergence, poll_until
from lbconform_lab import topology as topo
from tests.lab.helpers import (
    Stopwatch,
    client_get,
    deploy_backend,
    health_check,
    node_port,
    pods_by_node,
)

pytestmark = pytest.mark.lab


def _delete(api: RawApi, namespace: str, name: str) -> Stopwatch:
    api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return Stopwatch()


def _wait_gone(api: RawApi, namespace: str, name: str, clock: Stopwatch, timeout: float) -> float:
    def gone() -> bool:
        try:
            api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as exc:
            return exc.status == 404
        return False

    poll_until(gone, timeout=timeout, interval=0.05, description=f"pod {name} to be removed")
    return clock()


def test_terminating_pod_serves_during_pre_stop_while_health_check_fails(
    test_namespace: Applier,
) -> None:
    pre_stop, delay = 4, 2
    _, svc = deploy_backend(test_namespace, tweaks.one_per_node, tweaks.traffic_policy_local,
                            tweaks.pre_stop_sleep(pre_stop), tweaks.delay_shutdown(delay),
                            tweaks.grace_period(20))
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    node = topo.node_by_name("node-2", 3)
    pod = pods_by_node(api, ns)[node.name]
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    hc = int(svc["spec"]["healthCheckNodePort"])
    await_convergence(lambda: health_check(node, hc)[0] == 200, successes=3, timeout=15,
                      description=f"{node.name}'s health check to pass before the deletion")

    clock = _delete(api, ns, name)
    seen_terminating_serving = seen_hc_503 = seen_served = False
    while clock() < pre_stop - 0.5:
        ep = objects.endpoints(api, ns, "backend").get(ip, {})
        seen_terminating_serving |= bool(ep.get("terminating") and ep.get("serving") and not ep.get("ready"))
        status, body = health_check(node, hc)
        seen_hc_503 |= status == 503 and body["localEndpoints"] == 0
        status, text = client_get(node.ip, node_port(svc), "/hostname")
        seen_served |= status == 200 and text == name
        time.sleep(0.1)
    assert seen_terminating_serving, "EndpointSlice never showed the pod terminating and serving"
    assert seen_hc_503, "the node's health check never failed during preStop"
    assert seen_served, "the NodePort stopped serving the terminating pod during preStop"
    # SIGTERM comes after preStop; netexec then serves `delay` more seconds and exits 0.
    took = _wait_gone(api, ns, name, clock, timeout=30)
    assert pre_stop + delay - 0.5 <= took <= pre_stop + delay + 3, took


@pytest.mark.parametrize(("pre_stop", "grace", "expected"), [
    (2, 6, 6),   # SIGKILL when the grace period, counted from the deletion, runs out
    (5, 5, 7),   # the kubelet never leaves less than 2 s between preStop's end and SIGKILL
])
def test_sigkill_comes_at_the_grace_period(
    test_namespace: Applier, pre_stop: int, grace: int, expected: int,
) -> None:
    deploy_backend(test_namespace, tweaks.replicas(1), tweaks.pre_stop_sleep(pre_stop),
                   tweaks.delay_shutdown(120), tweaks.grace_period(grace),
                   tweaks.service_type("ClusterIP"))
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    (pod,) = pods_by_node(api, ns).values()
    clock = _delete(api, ns, pod["metadata"]["name"])
    took = _wait_gone(api, ns, pod["metadata"]["name"], clock, timeout=60)
    assert expected - 0.5 <= took <= expected + 2.5, took
