"""A node dies as a VM does, is seen dead by the real node lifecycle controller, and heals."""

from __future__ import annotations

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier
from lbconform.wait import poll_until
from lbconform_lab.cluster import Lab
from lbconform_lab.controlplane import NODE_MONITOR_GRACE_SECONDS
from tests.lab.helpers import Stopwatch, deploy_backend, pods_by_node

pytestmark = pytest.mark.lab

#: The lifecycle controller looks every second and then updates the Node and the slices.
DETECTION_SLACK_SECONDS = 4.0


def test_killed_node_goes_not_ready_and_comes_back(lab: Lab, test_namespace: Applier) -> None:
    deploy_backend(test_namespace, tweaks.one_per_node)
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    victim = "node-3"
    ip = pods_by_node(api, ns)[victim]["status"]["podIP"]

    lab.kill_node(victim)
    clock = Stopwatch()
    try:
        poll_until(lambda: objects.node_condition(api, victim) == "Unknown",
                   timeout=NODE_MONITOR_GRACE_SECONDS + DETECTION_SLACK_SECONDS, interval=0.1,
                   description=f"{victim} to be marked NotReady")
        detected = clock()
        poll_until(lambda: objects.endpoints(api, ns, "backend")[ip].get("ready") is False,
                   timeout=DETECTION_SLACK_SECONDS, interval=0.1,
                   description=f"the endpoint on {victim} to turn not ready")
        assert detected >= NODE_MONITOR_GRACE_SECONDS - 2, f"NotReady after only {detected:.1f}s"
    finally:
        lab.start_node(victim)
    assert objects.node_condition(api, victim) == "True"

    def healed() -> bool:
        eps = objects.endpoints(api, ns, "backend")
        return len(eps) == 3 and all(e.get("ready") for e in eps.values())

    poll_until(healed, timeout=60, interval=0.2,
               description=f"the backend on {victim} to be ready again after the restart")
