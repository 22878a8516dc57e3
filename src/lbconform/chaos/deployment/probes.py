"""Whether a Deployment's rollout has finished, as ``kubectl rollout status`` decides it.

chaostoolkit-kubernetes' ``deployment_fully_available`` compares ready replicas with the
desired count, which holds at once after ``rollout_deployment`` (the old pods are still
ready): it cannot tell a restart that has not started from one that has finished.
"""

from __future__ import annotations

from typing import Any

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos.context import kube_api
from lbconform.wait import WaitTimeout, poll_until

__all__ = ["wait_for_rollout"]


def rollout_complete(deployment: dict[str, Any]) -> bool:
    """The controller saw the latest spec and every replica is updated and available."""
    spec, status = deployment.get("spec", {}), deployment.get("status", {})
    want = int(spec.get("replicas", 1))
    return (int(status.get("observedGeneration", 0)) >= int(deployment["metadata"].get("generation", 0))
            and int(status.get("updatedReplicas", 0)) == want
            and int(status.get("replicas", 0)) == want
            and int(status.get("availableReplicas", 0)) == want)


def wait_for_rollout(name: str, ns: str = "default", timeout: float = 180) -> bool:
    """Wait up to ``timeout`` seconds for Deployment ``name`` in ``ns`` to finish its rollout:
    every replica updated and available, no old one left. Fails when it does not."""
    api = kube_api()
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    try:
        poll_until(lambda: rollout_complete(api.get(path)), timeout=float(timeout), interval=1.0,
                   description=f"deployment {ns}/{name} to finish its rollout")
    except WaitTimeout as exc:
        raise ActivityFailed(str(exc)) from None
    return True
