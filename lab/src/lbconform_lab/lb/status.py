"""Everything the reference LB writes to the apiserver: the cleanup finalizer, ``status.loadBalancer``
and events.

Writes are merge patches against the Service as the informer last saw it. One that fails (a conflict,
a Service gone, an apiserver that does not answer) asks for another pass (``retry``), which reads the
Service again and decides again: nothing here retries by itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from lbconform.kube.informer import Informer
from lbconform.kube.jig import CLEANUP_FINALIZER
from lbconform.kube.rawapi import MERGE, ApiError, Json, RawApi
from lbconform_lab.lb.defects import At, apply
from lbconform_lab.lb.params import ip_mode
from lbconform_lab.lb.service import ServiceState

log = logging.getLogger(__name__)


def published_ip_mode(st: ServiceState) -> str:
    """The ipMode the Service's ingress says."""
    return apply(At.IP_MODE, ip_mode(st.params.mode), st.defects, st.params.mode)


class Writes:
    """The LB's writes to the apiserver."""

    def __init__(self, api: RawApi, retry: Callable[[], None]) -> None:
        self.api = api
        self.retry = retry

    @staticmethod
    def _path(svc: Json) -> str:
        return f"/api/v1/namespaces/{svc['metadata']['namespace']}/services/{svc['metadata']['name']}"

    def add_finalizer(self, svc: Json, defects: frozenset[str]) -> bool:
        """Whether the Service carries the cleanup finalizer now (or goes without it)."""
        finalizers = list(svc["metadata"].get("finalizers") or [])
        if CLEANUP_FINALIZER in finalizers or not apply(At.FINALIZER, True, defects):
            return True
        return self._set_finalizers(svc, [*finalizers, CLEANUP_FINALIZER])

    def remove_finalizer(self, svc: Json) -> None:
        if CLEANUP_FINALIZER in (svc["metadata"].get("finalizers") or []):
            self._set_finalizers(svc, [f for f in svc["metadata"]["finalizers"] if f != CLEANUP_FINALIZER])

    def _set_finalizers(self, svc: Json, finalizers: list[str]) -> bool:
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": svc["metadata"]["resourceVersion"]}}
        try:
            self.api.patch(self._path(svc), body, MERGE)
            return True
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("finalizer update of %s failed: %s", Informer.key(svc), exc)
            self.retry()
            return False

    def publish(self, svc: Json, st: ServiceState) -> None:
        """Write the Service's address and ipMode to its status, unless it says them already."""
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        want = [{"ip": st.vip, "ipMode": published_ip_mode(st)}]
        if ingress == want:
            return
        self._patch_status(svc, want)

    def clear(self, svc: Json) -> None:
        """Take the address out of the Service's status."""
        self._patch_status(svc, None)

    def _patch_status(self, svc: Json, ingress: list[Json] | None) -> None:
        lb: dict[str, Any] = {"ingress": ingress}
        try:
            self.api.patch(self._path(svc) + "/status", {"status": {"loadBalancer": lb}}, MERGE)
        except ApiError as exc:
            log.warning("status update of %s failed: %s", Informer.key(svc), exc)
            self.retry()

    def event(self, svc: Json, kind: str, reason: str, message: str) -> None:
        meta = svc["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            self.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"kind": "Service", "namespace": meta["namespace"], "name": meta["name"],
                                   "uid": meta["uid"], "apiVersion": "v1"},
                "reason": reason, "message": message, "type": kind,
                "source": {"component": "lbconform-lab-lb"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            })
        except ApiError as exc:
            log.debug("event %s not recorded: %s", reason, exc)
