"""The Service jig: one Service of type LoadBalancer, created, awaited, changed and described.

As upstream's e2e service jig: ``create`` applies the Service with named tweaks and
registers its cleanup, ``wait_for_load_balancer`` returns the ingress address once it is
there (and says what it saw when it is not), ``update`` retries on conflicts, and
``diagnostics`` gathers what a failed test needs: the Service, its EndpointSlices, its
events and its pods' states.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lbconform.kube import objects
from lbconform.kube.manifests import Applier, Tweak, load_one
from lbconform.kube.rawapi import ApiError, Json
from lbconform.wait import Deadline, LbWaitTimeout, WaitTimeout, poll_until

log = logging.getLogger(__name__)

#: How many times ``update`` re-reads and re-applies after a conflict.
UPDATE_ATTEMPTS = 5
#: The finalizer with which service controllers hold a Service until its LB is gone.
CLEANUP_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


class LoadBalancerTimeout(LbWaitTimeout):
    """The Service got no ingress address in time; the message names the timeout."""


@dataclass
class ServiceJig:
    """Owns one Service in the namespace of ``applier``."""

    applier: Applier
    name: str = "backend"

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.applier.namespace}/services/{self.name}"

    def create(self, *tweaks: Tweak, manifest: str = "backend-service") -> Json:
        obj = load_one(manifest, *tweaks)
        obj["metadata"]["name"] = self.name
        return self.applier.create(obj)

    def get(self) -> Json:
        return self.applier.api.get(self.path)

    def ingress(self) -> str | None:
        ingress = self.get().get("status", {}).get("loadBalancer", {}).get("ingress") or []
        if not ingress:
            return None
        first = ingress[0]
        return str(first.get("ip") or first.get("hostname") or "") or None

    def wait_for_load_balancer(self, timeout: float, timeout_name: str = "lb_create") -> str:
        try:
            return poll_until(self.ingress, timeout=timeout, interval=0.2,
                              description=f"Service {self.applier.namespace}/{self.name} to get an "
                                          f"ingress address (timeout {timeout_name}={timeout:g}s)")
        except WaitTimeout as exc:
            raise LoadBalancerTimeout(exc.description, exc.timeout, self._summary(), exc.last_error) from exc

    def ingress_over(self, seconds: float, expect: str | None, interval: float = 0.2) -> str | None:
        """Watch the ingress address for ``seconds``: the first value other than ``expect``, as
        soon as it shows, else ``expect``."""
        deadline = Deadline.after(seconds)
        while True:
            address = self.ingress()
            if address != expect or deadline.expired():
                return address
            time.sleep(min(interval, deadline.remaining()))

    def warnings(self) -> list[str]:
        """The Warning events about this Service, as ``reason: message``."""
        events = self.applier.api.get(f"/api/v1/namespaces/{self.applier.namespace}/events",
                                      fieldSelector=f"involvedObject.kind=Service,involvedObject.name={self.name}")
        return [f"{e.get('reason')}: {e.get('message')}" for e in events.get("items", [])
                if e.get("type") == "Warning"]

    def finalizers(self) -> list[str]:
        return list(self.get()["metadata"].get("finalizers") or [])

    def wait_for_deprovisioned(self, timeout: float, timeout_name: str = "lb_delete") -> None:
        """No ingress address and no cleanup finalizer left on the Service."""

        def released() -> bool:
            return self.ingress() is None and CLEANUP_FINALIZER not in self.finalizers()

        poll_until(released, timeout=timeout, interval=0.2, timeout_error=LbWaitTimeout,
                   description=f"Service {self.applier.namespace}/{self.name} to lose its ingress address "
                               f"and finalizer (timeout {timeout_name}={timeout:g}s)")

    def delete_and_wait(self, timeout: float, timeout_name: str = "lb_delete") -> None:
        """Delete the Service and wait until the object is gone (its finalizer released)."""
        self.applier.api.delete(self.path)

        def gone() -> bool:
            try:
                self.get()
            except ApiError as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        poll_until(gone, timeout=timeout, interval=0.2, timeout_error=LbWaitTimeout,
                   description=f"deleted Service {self.applier.namespace}/{self.name} to be gone "
                               f"(timeout {timeout_name}={timeout:g}s)")

    def update(self, change: Callable[[Json], None]) -> Json:
        """Read, change, write; on a conflict, read again and retry."""
        for _ in range(UPDATE_ATTEMPTS):
            svc = self.get()
            change(svc)
            try:
                return self.applier.api.put(self.path, svc)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                log.info("conflict updating %s, retrying", self.path)
        raise RuntimeError(f"{self.path}: still conflicting after {UPDATE_ATTEMPTS} attempts")

    def _summary(self) -> str:
        svc = self.get()
        return json.dumps({"type": svc["spec"].get("type"), "status": svc.get("status", {}),
                           "finalizers": svc["metadata"].get("finalizers")})

    def diagnostics(self) -> dict[str, Any]:
        """Everything about the Service a failing test should attach."""
        api, ns = self.applier.api, self.applier.namespace
        assert ns is not None
        out: dict[str, Any] = {}
        try:
            svc = self.get()
            out["service"] = svc
            selector = ",".join(f"{k}={v}" for k, v in (svc["spec"].get("selector") or {}).items())
            out["pods"] = [{"name": p["metadata"]["name"], "node": p["spec"].get("nodeName"),
                            "phase": p.get("status", {}).get("phase"), "ip": p.get("status", {}).get("podIP"),
                            "ready": objects.pod_ready(p),
                            "deleting": bool(p["metadata"].get("deletionTimestamp"))}
                           for p in (objects.pods(api, ns, selector) if selector else [])]
        except ApiError as exc:
            out["service"] = f"unreadable: {exc}"
        out["endpointslices"] = objects.endpoint_slices(api, ns, self.name)
        events = api.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
        out["events"] = [
            f"{e.get('lastTimestamp')} {e['involvedObject']['kind']}/{e['involvedObject']['name']} "
            f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in events]
        return out
