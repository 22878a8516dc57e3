"""Flapping backends: agnhost netexec pods that go not-ready and come back, over and over.

netexec has no switch that fails its ``/readyz`` and then heals it: ``/readyz`` answers 503
only after SIGTERM, and the process then exits. What it does offer is ``/exit``, a graceful
shutdown (stop accepting, let open requests finish within a timeout, exit). So one flap is:
``GET /exit`` through the apiserver's pod proxy (so it works wherever the apiserver reaches
pods, with no route from here to pod IPs), the kubelet sees the container exit and marks
the pod not ready, restarts the container (restartPolicy Always), and the readiness probe
makes it ready again. The pod keeps its name and IP; its EndpointSlice entry goes not ready
and back, which is what the LB and kube-proxy must follow without dropping traffic to the
other backends. Unlike a pure readiness flap, the flapping pod stops serving meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos.context import kube_api
from lbconform.kube.objects import pod_ready
from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.wait import WaitTimeout, poll_until

__all__ = ["flap_backends"]

log = logging.getLogger(__name__)

#: How long one ``/exit`` call may take through the pod proxy before it counts as sent anyway.
EXIT_CALL_SECONDS = 10.0


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount", 0)) for c in pod.get("status", {}).get("containerStatuses") or [])


def _exit_through_proxy(api: RawApi, ns: str, pod: str, port: int, shutdown_seconds: float) -> None:
    path = f"/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/exit"
    try:
        api.request("GET", path, query={"code": "0", "timeout": f"{shutdown_seconds:g}s"},
                    timeout=EXIT_CALL_SECONDS)
    except (ApiError, OSError, ValueError) as exc:
        # The server may close the proxied connection as it shuts down; the restart count says.
        log.debug("exit of %s/%s answered %s", ns, pod, exc)


def flap_backends(ns: str, label_selector: str, count: int = 1, cycles: int = 3, port: int = 8080,
                  shutdown_seconds: float = 2.0, ready_timeout: float = 120.0,
                  between_seconds: float = 2.0) -> list[dict[str, Any]]:
    """Make ``count`` ready backend pods (matching ``label_selector`` in ``ns``, first by name)
    go not ready and come back, ``cycles`` times: each flap asks netexec on ``port`` to exit
    gracefully (``shutdown_seconds`` for open requests), then waits up to ``ready_timeout``
    seconds for the restarted container to be ready, then ``between_seconds`` before the
    next. Returns one record per flap: pod, when it was asked to exit, when it was ready."""
    api = kube_api()
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    listing = api.get(pods_path, labelSelector=label_selector).get("items", [])
    chosen = sorted(p["metadata"]["name"] for p in listing if pod_ready(p))[:int(count)]
    if len(chosen) < int(count):
        raise ActivityFailed(f"{int(count)} ready pods matching {label_selector} in {ns} wanted, "
                             f"{len(chosen)} found")
    flaps: list[dict[str, Any]] = []
    for cycle in range(int(cycles)):
        if cycle:
            time.sleep(float(between_seconds))
        for name in chosen:
            before = _restarts(api.get(f"{pods_path}/{name}"))
            asked = time.time()
            _exit_through_proxy(api, ns, name, int(port), float(shutdown_seconds))

            def back(name: str = name, before: int = before) -> bool:
                pod = api.get(f"{pods_path}/{name}")
                return _restarts(pod) > before and pod_ready(pod)

            try:
                poll_until(back, timeout=float(ready_timeout), interval=0.5, retry_on=(ApiError, OSError),
                           description=f"pod {ns}/{name} restarted and ready again")
            except WaitTimeout as exc:
                raise ActivityFailed(str(exc)) from None
            flaps.append({"pod": name, "asked_exit": asked, "ready_again": time.time()})
            log.info("backend %s/%s flapped (cycle %d)", ns, name, cycle + 1)
    return flaps
