"""The ConfigMaps and Secrets a node's pods use, read through a short-lived cache.

The kubelet reads them with the node's own credentials (the Node authorizer lets a node
read only what its pods reference) and sees changes within its sync period. The agent
does the same with a time-to-live cache: an object is read again once it is older than
``TTL_SECONDS``, so a pod's files and a new container's env follow an update within a few
seconds, while many pods of one namespace sharing kube-root-ca.crt cost one read.
"""

from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass

from lbconform.kube.rawapi import ApiError, Json, RawApi

#: How old a cached object may be before it is read again.
TTL_SECONDS = 2.0
#: How long a missing object is taken as missing: short, since a pod waits on it (a new
#: namespace's kube-root-ca.crt is published moments after the namespace).
MISSING_TTL_SECONDS = 0.25
#: Objects no pod has asked for in this long are dropped (test namespaces come and go).
KEEP_SECONDS = 60.0

CONFIG_MAP, SECRET = "ConfigMap", "Secret"
_PATHS = {CONFIG_MAP: "configmaps", SECRET: "secrets"}


class Missing(Exception):
    """A referenced object (or a key of one) does not exist; the message is the kubelet's."""


@dataclass(frozen=True)
class Data:
    """An object's data as bytes by key, whichever kind it is."""

    kind: str
    namespace: str
    name: str
    items: dict[str, bytes]

    def key(self, key: str) -> bytes:
        if key not in self.items:
            raise Missing(f"couldn't find key {key} in {self.kind} {self.namespace}/{self.name}")
        return self.items[key]


def _items(kind: str, obj: Json) -> dict[str, bytes]:
    if kind == SECRET:
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


class ObjectCache:
    def __init__(self, api: RawApi, ttl: float = TTL_SECONDS) -> None:
        self.api = api
        self.ttl = ttl
        self._cache: dict[tuple[str, str, str], tuple[float, Data | None]] = {}
        self._lock = threading.Lock()

    def get(self, kind: str, namespace: str, name: str, optional: bool = False) -> Data | None:
        """The object's data; None when it is missing and ``optional``, else Missing."""
        key = (kind, namespace, name)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None or time.monotonic() - cached[0] > (
                self.ttl if cached[1] is not None else MISSING_TTL_SECONDS):
            try:
                obj = self.api.get(f"/api/v1/namespaces/{namespace}/{_PATHS[kind]}/{name}")
                data: Data | None = Data(kind, namespace, name, _items(kind, obj))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                data = None
            cached = (time.monotonic(), data)
            with self._lock:
                self._cache[key] = cached
                for old in [k for k, (at, _) in self._cache.items() if cached[0] - at > KEEP_SECONDS]:
                    del self._cache[old]
        if cached[1] is None and not optional:
            raise Missing(f'{kind.lower()} "{name}" not found')
        return cached[1]
