"""The node's pod registry: one JSON file per pod that the node's kubelet API reads.

The agent (Python) runs the pods; the kubelet API server (Go, built with the kubelet's own
streaming code) serves logs, exec, attach and port-forward for them. They share no memory,
so the agent publishes what the server needs to find a pod's processes and files, and
replaces each file atomically so the server never reads half of one:

``<node dir>/pods/<namespace>_<name>.json``::

    {"namespace": "...", "name": "...", "uid": "...",
     "netns": "lbc-pod-..." | null,        # null for hostNetwork pods
     "ip": "100.64.1.7",
     "containers": {"<name>": {"pid": 1234 | null,      # the running process, if any
                               "log": "/abs/path",       # this run's log ("" before the first)
                               "previousLog": "/abs/path" | ""}}}   # the run before

A container's pid is the process whose namespaces (network, mount, UTS) an exec enters.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def pods_dir(node_dir: Path) -> Path:
    return node_dir / "pods"


def record_path(node_dir: Path, namespace: str, name: str) -> Path:
    return pods_dir(node_dir) / f"{namespace}_{name}.json"


def publish(node_dir: Path, record: dict[str, Any]) -> None:
    """Write (or replace) a pod's record."""
    path = record_path(node_dir, record["namespace"], record["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, sort_keys=True))
    tmp.replace(path)


def withdraw(node_dir: Path, namespace: str, name: str, uid: str) -> None:
    """Remove a pod's record, if it is still this pod's (a new pod of the same name may own it)."""
    path = record_path(node_dir, namespace, name)
    try:
        if json.loads(path.read_text()).get("uid") == uid:
            path.unlink(missing_ok=True)
    except (OSError, ValueError):
        return
