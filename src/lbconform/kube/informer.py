"""A small list-and-watch cache of one collection, with a callback on every change.

After every (re-)list it reports what changed since the cache it had: objects listed are
ADDED or MODIFIED, objects that vanished while the watch was down are DELETED, so a consumer
that reacts per object never misses a deletion.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from lbconform.kube.rawapi import ApiError, Json, RawApi

log = logging.getLogger(__name__)

#: Pause before re-listing after a broken watch that was not a plain expiry.
RELIST_BACKOFF_SECONDS = 1.0

OnEvent = Callable[[str, Json], None]


class Informer(threading.Thread):
    """Keeps ``items`` (namespace/name -> object) current for one collection path."""

    def __init__(self, api: RawApi, path: str, on_event: OnEvent, **query: Any) -> None:
        super().__init__(name=f"informer{path}", daemon=True)
        self.api = api
        self.path = path
        self.query = query
        self.on_event = on_event
        self.items: dict[str, Json] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()

    @staticmethod
    def key(obj: Json) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def snapshot(self) -> list[Json]:
        with self.lock:
            return list(self.items.values())

    def _relist(self) -> str:
        listing = self.api.get(self.path, **self.query)
        fresh = {self.key(o): o for o in listing.get("items", [])}
        with self.lock:
            old, self.items = self.items, fresh
        for k, obj in fresh.items():
            self.on_event("MODIFIED" if k in old else "ADDED", obj)
        for k, obj in old.items():
            if k not in fresh:
                self.on_event("DELETED", obj)
        self.synced.set()
        return str(listing["metadata"]["resourceVersion"])

    def run(self) -> None:
        while True:
            try:
                rv = self._relist()
                for event in self.api.watch(self.path, rv, **self.query):
                    kind, obj = event["type"], event["object"]
                    if kind == "BOOKMARK":
                        continue
                    with self.lock:
                        if kind == "DELETED":
                            self.items.pop(self.key(obj), None)
                        else:
                            self.items[self.key(obj)] = obj
                    self.on_event(kind, obj)
            except ApiError as exc:
                if exc.status != 410:
                    log.warning("watch %s: %s", self.path, exc)
                    time.sleep(RELIST_BACKOFF_SECONDS)
            except Exception as exc:
                log.warning("watch %s broke: %s", self.path, exc)
                time.sleep(RELIST_BACKOFF_SECONDS)
