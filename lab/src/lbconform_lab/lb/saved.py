"""What a restarted reference LB starts from: what it cannot read back from the cluster.

Its defects, lab-wide and per run (switched at runtime, so not those of its command line); each
Service's healthy backends (their new checkers start healthy, so a restart fails no flow); and where
the next address search starts (an address a deleted Service just gave up is not handed out again at
once). Written whole, a temporary file renamed, whenever it changes; read once, at start. A deleted
Service whose address the keep-deleted-vip defect kept is not in it: a restart forgets it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lbconform_lab.lb.defects import DEFECTS
from lbconform_lab.lb.model import Json

log = logging.getLogger(__name__)


@dataclass
class Saved:
    defects: frozenset[str] = frozenset()
    #: Run id -> that run's defects.
    run_defects: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: The address search's cursor (``allocate.Addresses.cursor``).
    next_vip: int = 0
    #: Service key -> (its uid, its healthy backends).
    healthy: Mapping[str, tuple[str, set[str]]] = field(default_factory=dict)

    def document(self) -> Json:
        return {"defects": sorted(self.defects),
                "runDefects": {run: sorted(d) for run, d in sorted(self.run_defects.items())},
                "nextVip": self.next_vip,
                "healthy": {k: {"uid": uid, "backends": sorted(backends)}
                            for k, (uid, backends) in sorted(self.healthy.items())}}


class StateFile:
    """The saved state's file; without a path, nothing is saved or read."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        #: The document last written or read.
        self.written: Json = {}
        #: The pass and the state API's threads (switching defects) both save.
        self.lock = threading.Lock()

    def load(self) -> Saved | None:
        """What the process before this one saved, if anything (defects it no longer knows dropped)."""
        if self.path is None or not self.path.exists():
            return None
        doc = json.loads(self.path.read_text())
        known = frozenset(DEFECTS)
        saved = Saved(defects=frozenset(doc["defects"]) & known,
                      run_defects={run: frozenset(d) & known for run, d in doc["runDefects"].items()},
                      next_vip=int(doc["nextVip"]),
                      healthy={k: (v["uid"], set(v["backends"])) for k, v in doc["healthy"].items()})
        self.written = doc
        log.info("restarted: %d Services' healthy backends, defects %s, run defects %s", len(saved.healthy),
                 sorted(saved.defects), {r: sorted(d) for r, d in saved.run_defects.items()})
        return saved

    def save(self, saved: Saved) -> None:
        """Write the state when it changed."""
        if self.path is None:
            return
        doc = saved.document()
        with self.lock:
            if doc != self.written:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_text(json.dumps(doc))
                os.replace(tmp, self.path)
                self.written = doc
