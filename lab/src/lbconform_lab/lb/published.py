"""Each provisioned Service's pool as a Kubernetes object: a ``BackendPool`` (``lab.lbconform.io``).

The state API (``api``) serves the pool as a cloud API does, inside the LB's namespace only. The
BackendPool is the implementation-neutral view of the same pool, as MetalLB's ServiceL2Status objects
are of its announcements: one per Service, in the Service's namespace and named as it, owned by it
(the garbage collector removes it with the Service), its ``status`` the Service, its backend mode and
every backend of the pool with its address and whether it is in the healthy set, exactly as
``describe`` says them. A declaration's ``backendPool`` reads it from the cluster.

Written by a thread of its own (``Publisher``), never inside the pass: a pass that waits on the
apiserver holds up every Service's next pass. Written only when its content changed since the last
write (kept per Service in memory; a restarted LB writes each once), and again after
``RESYNC_SECONDS`` in case someone deleted it; a write that fails is tried again later, no sooner
than ``RETRY_SECONDS`` after, and never fails the pass.

The CustomResourceDefinition is ``backendpool-crd.yaml`` beside this module, which the lab applies
(``install``) before it starts the LB.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Container, Iterable
from importlib import resources
from typing import Final

import yaml

from lbconform.kube.rawapi import MERGE, ApiError, Json, RawApi
from lbconform.wait import NotYet, poll_until
from lbconform_lab.lb.service import ServiceState

__all__ = ["API_VERSION", "CRD_MANIFEST", "GROUP", "KIND", "PLURAL", "Published", "Publisher", "crd",
           "install", "members", "pool_object", "pool_status"]

log = logging.getLogger(__name__)

GROUP: Final = "lab.lbconform.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "BackendPool"
PLURAL: Final = "backendpools"
CRD_MANIFEST: Final = "backendpool-crd.yaml"
#: Who writes the objects, as their ``app.kubernetes.io/managed-by`` label says.
MANAGER: Final = "lbconform-lab-lb"
#: A Service whose write failed (the CRD not there yet, an apiserver that does not answer) is not
#: written again for this long: dozens of Services must not make a failing request every pass.
RETRY_SECONDS: Final = 2.0
#: An object written this long ago (up to half as long again, so that Services written in one pass
#: are not all written again in one pass) is written again though its content did not change: one
#: deleted behind the LB's back (by hand, or by the garbage collector racing a Service made again
#: under the same name) comes back. A merge patch that changes nothing costs the apiserver no write.
RESYNC_SECONDS: Final = 60.0
#: The writer looks for work at least this often (a pass wakes it at once).
FLUSH_SECONDS: Final = 1.0
#: Time for the apiserver to establish the CRD (it serves the kind once Established; a second or so).
ESTABLISHED_SECONDS: Final = 30.0

Clock = Callable[[], float]


def members(st: ServiceState) -> list[Json]:
    """Every backend of the Service's pool, by name: its address and whether it is healthy (in the
    healthy set), the ``name``, ``address`` and ``healthy`` of ``describe``'s pool entries."""
    return [{"name": k, "address": b.ip, "healthy": k in st.healthy} for k, b in sorted(st.pool.items())]


def pool_status(st: ServiceState) -> Json:
    """The BackendPool's ``status``: the Service, its backend mode and its pool."""
    return {"service": st.key, "mode": st.params.mode, "members": members(st)}


def _split(key: str) -> tuple[str, str]:
    namespace, name = key.split("/", 1)
    return namespace, name


def _path(namespace: str, name: str = "") -> str:
    collection = f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{collection}/{name}" if name else collection


def _metadata(name: str, uid: str) -> Json:
    """The labels and the owner (the Service, whose deletion the object does not hold up)."""
    return {"labels": {"app.kubernetes.io/managed-by": MANAGER},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": uid,
                                 "controller": True, "blockOwnerDeletion": False}]}


def pool_object(key: str, uid: str, status: Json) -> Json:
    """The whole BackendPool of the Service ``key`` (namespace/name) of ``uid``."""
    namespace, name = _split(key)
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": namespace, **_metadata(name, uid)},
            "status": status}


class Published:
    """The BackendPools the LB keeps: one per provisioned Service."""

    def __init__(self, api: RawApi, clock: Clock = time.monotonic) -> None:
        self.api = api
        self.clock = clock
        #: Service key -> (uid, status) last written, and when it is due to be written again.
        self.written: dict[str, tuple[tuple[str, Json], float]] = {}
        #: Service key -> when a write or removal may be tried again after one failed.
        self.not_before: dict[str, float] = {}
        #: Keys of released Services whose object a failed removal left behind.
        self.doomed: set[str] = set()

    def _waiting(self, key: str) -> bool:
        return self.clock() < self.not_before.get(key, 0.0)

    def _failed(self, key: str) -> None:
        self.not_before[key] = self.clock() + RETRY_SECONDS

    def sync(self, st: ServiceState) -> None:
        """The Service's BackendPool says its pool now, unless it was written so already."""
        self.sync_status(st.key, st.uid, pool_status(st))

    def sync_status(self, key: str, uid: str, status: Json) -> None:
        """The BackendPool of the Service ``key`` (of ``uid``) says ``status``, unless it was
        written so already."""
        self.doomed.discard(key)
        wanted = (uid, status)
        last, due = self.written.get(key, (None, 0.0))
        if (last == wanted and self.clock() < due) or self._waiting(key):
            return
        self.written.pop(key, None)
        namespace, name = _split(key)
        patch = {"metadata": _metadata(name, uid), "status": status}
        try:
            try:
                self.api.patch(_path(namespace, name), patch, MERGE)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self.api.post(_path(namespace), pool_object(key, uid, status))
        except ApiError as exc:
            # 409: made meanwhile, patched on the next pass; 403/404: a namespace terminating or
            # gone (or the CRD not established yet); anything else is worth a line.
            if exc.status not in (403, 404, 409):
                log.warning("BackendPool %s not written: %s", key, exc)
            if exc.status != 409:
                self._failed(key)
            return
        except (OSError, ValueError) as exc:  # no answer, or one that is not JSON
            log.warning("BackendPool %s not written: %s", key, exc)
            self._failed(key)
            return
        self.written[key] = (wanted, self.clock() + RESYNC_SECONDS * random.uniform(1.0, 1.5))
        self.not_before.pop(key, None)

    def remove(self, key: str) -> None:
        """Delete the BackendPool of a Service the LB released; a failed deletion is tried again
        by ``retry_removals``."""
        self.written.pop(key, None)
        self.not_before.pop(key, None)
        self.doomed.add(key)
        self._delete(key)

    def retry_removals(self, served: Container[str]) -> None:
        """Try the failed deletions again, but those of Services served again meanwhile."""
        for key in sorted(self.doomed):
            if key in served:
                self.doomed.discard(key)
            elif not self._waiting(key):
                self._delete(key)

    def _delete(self, key: str) -> None:
        try:
            self.api.delete(_path(*_split(key)))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("BackendPool %s not deleted: %s", key, exc)
                self._failed(key)
                return
        except (OSError, ValueError) as exc:
            log.warning("BackendPool %s not deleted: %s", key, exc)
            self._failed(key)
            return
        self.doomed.discard(key)
        self.not_before.pop(key, None)


class Publisher:
    """The pass's BackendPool work, done by a thread of its own: the pass only notes what each
    object should say (in memory), and ``Published`` writes it to the apiserver, so that a slow
    apiserver does not hold up the pass. What is noted for a Service replaces what was noted
    before and not yet written: only the latest content is ever written. What a pass notes is
    written only once the pass's rules are in (``commit``): a reader who sees a backend leave the
    object must find no new connection going to it (a pool written before the rules let a
    user-path run see a node out of the pool while its rules still sent it a new connection)."""

    def __init__(self, published: Published) -> None:
        self.published = published
        self.lock = threading.Lock()
        #: Service key -> (uid, status) to write, or None to delete the object: noted by the pass
        #: in progress, and committed (may be written).
        self.noted: dict[str, tuple[str, Json] | None] = {}
        self.wanted: dict[str, tuple[str, Json] | None] = {}
        #: The Services served at the last pass, for ``Published.retry_removals``: the same two.
        self.noted_served: frozenset[str] | None = None
        self.served: frozenset[str] | None = None
        self.wake = threading.Event()

    def sync(self, st: ServiceState) -> None:
        with self.lock:
            self.noted[st.key] = (st.uid, pool_status(st))

    def remove(self, key: str) -> None:
        with self.lock:
            self.noted[key] = None

    def retry_removals(self, served: Iterable[str]) -> None:
        with self.lock:
            self.noted_served = frozenset(served)

    def commit(self) -> None:
        """The pass's rules are in: what it noted may be written now."""
        with self.lock:
            self.wanted.update(self.noted)
            self.noted = {}
            if self.noted_served is not None:
                self.served, self.noted_served = self.noted_served, None
        self.wake.set()

    def flush(self) -> None:
        """Write what was noted since the last flush."""
        with self.lock:
            work, self.wanted = self.wanted, {}
            served, self.served = self.served, None
        for key, want in work.items():
            if want is None:
                self.published.remove(key)
            else:
                self.published.sync_status(key, *want)
        if served is not None:
            self.published.retry_removals(served)

    def start(self) -> None:
        threading.Thread(target=self._serve, name="backendpools", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.wake.wait(FLUSH_SECONDS)
            self.wake.clear()
            try:
                self.flush()
            except Exception:  # a write's surprise must not end the writer
                log.exception("BackendPool writes failed")


def crd() -> Json:
    """The BackendPool CustomResourceDefinition, as this package ships it."""
    text = resources.files("lbconform_lab.lb").joinpath(CRD_MANIFEST).read_text(encoding="utf-8")
    doc: Json = yaml.safe_load(text)
    return doc


def install(api: RawApi, timeout: float = ESTABLISHED_SECONDS) -> None:
    """Create the CRD (kept if it exists) and return once the apiserver serves the kind."""
    obj = crd()
    collection = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        api.post(collection, obj)
    except ApiError as exc:
        if exc.status != 409:
            raise

    def established() -> bool | NotYet:
        status = api.get(f"{collection}/{obj['metadata']['name']}").get("status", {})
        conditions = status.get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return True
        return NotYet(f"conditions {[(c['type'], c['status']) for c in conditions]}")

    poll_until(established, timeout=timeout, interval=0.1, retry_on=(ApiError, OSError),
               description=f"the CRD {obj['metadata']['name']} to be Established")
