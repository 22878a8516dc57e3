"""A small list-and-watch cache of one resource, calling back on every change."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lbconform.kube.rawapi import ApiError, Json, RawApi

log = logging.getLogger(__name__)

#: Pause before re-listing after a broken watch that was not a plain expiry.
RELIST_BACKOFF_SECONDS = 1.0


class Informer(threading.Thread):
    """Keeps ``items`` (namespace/name -> object) current for one collection path."""

    def __init__(self, api: RawApi, path: str, on_change: Callable[[], None]) -> None:
        super().__init__(name=f"informer{path}", daemon=True)
        self.api = api
        self.path = path
        self.on_change = on_change
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

    def run(self) -> None:
        while True:
            try:
                listing = self.api.get(self.path)
                with self.lock:
                    self.items = {self.key(o): o for o in listing.get("items", [])}
                self.synced.set()
                self.on_change()
                rv = listing["metadata"]["resourceVersion"]
                for event in self.api.watch(self.path, rv):
                    kind, obj = event["type"], event["object"]
                    if kind == "BOOKMARK":
                        continue
                    with self.lock:
                        if kind == "DELETED":
                            self.items.pop(self.key(obj), None)
                        else:
                            self.items[self.key(obj)] = obj
                    self.on_change()
            except ApiError as exc:
                if exc.status != 410:
                    log.warning("watch %s: %s", self.path, exc)
                    time.sleep(RELIST_BACKOFF_SECONDS)
            except Exception as exc:
                log.warning("watch %s broke: %s", self.path, exc)
                time.sleep(RELIST_BACKOFF_SECONDS)
