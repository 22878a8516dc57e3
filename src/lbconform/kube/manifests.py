"""Manifests: YAML from manifests/, applied with their cleanup registered at creation.

``Applier`` creates objects in one namespace, remembers each one the moment the apiserver
has accepted it, and ``cleanup`` deletes them in reverse order and waits until they are
gone, so that a test leaves nothing behind even when it fails half-way.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import yaml

from lbconform.kube.rawapi import ApiError, Json, RawApi
from lbconform.resources import data_dir
from lbconform.wait import poll_until

log = logging.getLogger(__name__)

Tweak = Callable[[Json], None]

#: Object deletion (with finalizers and pod termination) must finish within this.
DELETE_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Kind:
    group_version: str
    plural: str
    namespaced: bool = True

    def collection(self, namespace: str | None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


KINDS: dict[str, Kind] = {
    "Namespace": Kind("v1", "namespaces", namespaced=False),
    "Pod": Kind("v1", "pods"),
    "Service": Kind("v1", "services"),
    "ConfigMap": Kind("v1", "configmaps"),
    "Deployment": Kind("apps/v1", "deployments"),
    "DaemonSet": Kind("apps/v1", "daemonsets"),
    "PodDisruptionBudget": Kind("policy/v1", "poddisruptionbudgets"),
}


def kind_of(obj: Json) -> Kind:
    try:
        return KINDS[obj["kind"]]
    except KeyError:
        raise ValueError(f"lbconform does not know how to apply kind {obj.get('kind')!r}") from None


def load(name: str, *tweaks: Tweak) -> list[Json]:
    """The documents of manifests/NAME (``.yaml`` may be left off), with tweaks applied."""
    path = data_dir("manifests") / (name if name.endswith(".yaml") else f"{name}.yaml")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        for tweak in tweaks:
            tweak(doc)
    return docs


def load_one(name: str, *tweaks: Tweak) -> Json:
    docs = load(name, *tweaks)
    if len(docs) != 1:
        raise ValueError(f"manifests/{name} holds {len(docs)} objects, expected one")
    return docs[0]


class Applier:
    """Creates objects and owns their deletion."""

    def __init__(self, api: RawApi, namespace: str | None, labels: dict[str, str] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.labels = labels or {}
        self._created: list[tuple[Kind, str | None, str]] = []

    def path(self, obj: Json) -> str:
        kind = kind_of(obj)
        ns = obj.get("metadata", {}).get("namespace") or self.namespace
        return f"{kind.collection(ns)}/{obj['metadata']['name']}"

    def create(self, obj: Json) -> Json:
        obj = copy.deepcopy(obj)
        kind = kind_of(obj)
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            meta.setdefault("namespace", self.namespace)
        meta.setdefault("labels", {}).update(self.labels)
        created = self.api.post(kind.collection(meta.get("namespace")), obj)
        self._created.append((kind, meta.get("namespace"), created["metadata"]["name"]))
        log.info("created %s %s/%s", obj["kind"], meta.get("namespace"), meta["name"])
        return created

    def create_all(self, objs: Iterable[Json]) -> list[Json]:
        return [self.create(o) for o in objs]

    def cleanup(self, timeout: float = DELETE_TIMEOUT_SECONDS, *, pod_grace: int | None = None) -> None:
        """Delete everything created, newest first, and wait until each is gone. With ``pod_grace``,
        pods of the namespace that are terminating meanwhile get that (shorter) grace period: a
        test's leftovers need not sit out the preStop hooks and grace periods it configured."""
        errors: list[str] = []
        while self._created:
            kind, ns, name = self._created.pop()
            path = f"{kind.collection(ns)}/{name}"
            try:
                self.api.delete(path, {"propagationPolicy": "Foreground"})
            except ApiError as exc:
                if exc.status != 404:
                    errors.append(f"{path}: {exc}")
                    continue

            def gone(path: str = path) -> bool:
                if pod_grace is not None and self.namespace:
                    self.shorten_terminating_pods(pod_grace)
                return is_gone(self.api, path)

            try:
                poll_until(gone, timeout=timeout, interval=0.2, description=f"{path} to be deleted")
            except Exception as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError("cleanup left objects behind: " + "; ".join(errors))

    def shorten_terminating_pods(self, grace: int) -> None:
        """Ask again, with ``grace`` seconds, for the deletion of every pod of the namespace that
        is terminating with a longer grace period (the apiserver only ever shortens it)."""
        for pod in self.api.get(f"/api/v1/namespaces/{self.namespace}/pods").get("items", []):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds") or 0) > grace:
                try:
                    self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{meta['name']}",
                                    {"gracePeriodSeconds": grace, "preconditions": {"uid": meta["uid"]}})
                except ApiError as exc:
                    if exc.status not in (404, 409):
                        raise


def is_gone(api: RawApi, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False

