"""What the harness marks as its own, and the sweeper that removes what a killed run left.

Every object the harness creates carries ``lbconform.io/run=<run id>``; a node the harness
changes (a taint, a label) carries the label too, with the change recorded in an annotation so that
it can be undone. The sweeper touches nothing without the label: it deletes labelled
namespaces (of one run, or older than an age) and undoes the recorded node changes.
"""

from __future__ import annotations

import json
import logging
import time
from calendar import timegm
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform.kube.rawapi import MERGE, ApiError, Json, RawApi

log = logging.getLogger(__name__)

RUN_LABEL = "lbconform.io/run"
#: On a node the harness changed: the JSON list of taint keys it added.
TAINTS_ANNOTATION = "lbconform.io/added-taints"
#: On a node the harness changed: the JSON list of label keys it added.
LABELS_ANNOTATION = "lbconform.io/added-labels"


@dataclass
class SweepResult:
    namespaces: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


def _age_seconds(obj: Json, now: float) -> float:
    stamp = obj["metadata"].get("creationTimestamp", "")
    try:
        return now - timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return 0.0


def run_selector(run_id: str | None) -> str:
    """The label selector of one run's objects (every run's, without an id)."""
    return f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL


#: Read-modify-write attempts on a node that other controllers also write.
NODE_UPDATE_ATTEMPTS = 5


def _on_fresh_node(api: RawApi, node: str, change: Callable[[Json], Json]) -> None:
    """Patch ``node`` with ``change(current node)``; on a conflict read it again."""
    for attempt in range(NODE_UPDATE_ATTEMPTS):
        try:
            api.patch(f"/api/v1/nodes/{node}", change(api.get(f"/api/v1/nodes/{node}")), content_type=MERGE)
            return
        except ApiError as exc:
            if exc.status != 409 or attempt == NODE_UPDATE_ATTEMPTS - 1:
                raise


def add_taint(api: RawApi, node: str, run_id: str, taint: Json) -> None:
    """Taint ``node``, labelled with the run and recorded, so the sweeper can undo it."""
    _on_fresh_node(api, node, lambda obj: _with_taint(obj, run_id, taint))


def _with_taint(obj: Json, run_id: str, taint: Json) -> Json:
    meta = obj["metadata"]
    added = json.loads(meta.get("annotations", {}).get(TAINTS_ANNOTATION, "[]"))
    taints = [t for t in obj["spec"].get("taints") or [] if t["key"] != taint["key"]] + [taint]
    return {
        # resourceVersion: a taint the node controller adds meanwhile makes this conflict, not vanish
        "metadata": {"resourceVersion": meta["resourceVersion"], "labels": {RUN_LABEL: run_id},
                     "annotations": {TAINTS_ANNOTATION: json.dumps(sorted({*added, taint["key"]}))}},
        "spec": {"taints": taints}}


def add_label(api: RawApi, node: str, run_id: str, key: str, value: str = "") -> None:
    """Label ``node`` with ``key``, labelled with the run and recorded, so the sweeper can undo it.
    A label the node had already is not the harness's to remove, so it is refused."""
    def change(obj: Json) -> Json:
        meta = obj["metadata"]
        if key in (meta.get("labels") or {}):
            raise ValueError(f"node {node} has the label {key} already: it is not the harness's to add")
        added = json.loads(meta.get("annotations", {}).get(LABELS_ANNOTATION, "[]"))
        return {"metadata": {"resourceVersion": meta["resourceVersion"],
                             "labels": {RUN_LABEL: run_id, key: value},
                             "annotations": {LABELS_ANNOTATION: json.dumps(sorted({*added, key}))}}}

    _on_fresh_node(api, node, change)


def restore_node(api: RawApi, node: str) -> None:
    """Remove the taints and labels the harness added to ``node``, and its marks."""
    _on_fresh_node(api, node, _without_added_marks)


def _without_added_marks(obj: Json) -> Json:
    annotations = obj["metadata"].get("annotations", {})
    added = set(json.loads(annotations.get(TAINTS_ANNOTATION, "[]")))
    labels = json.loads(annotations.get(LABELS_ANNOTATION, "[]"))
    taints = [t for t in obj["spec"].get("taints") or [] if t["key"] not in added]
    return {
        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                     "labels": {RUN_LABEL: None, **{key: None for key in labels}},
                     "annotations": {TAINTS_ANNOTATION: None, LABELS_ANNOTATION: None}},
        "spec": {"taints": taints or None}}


def sweep(api: RawApi, run_id: str | None = None, older_than: float = 0.0) -> SweepResult:
    """Delete the harness's namespaces (of ``run_id``, or all older than ``older_than`` s) and
    undo its node changes; returns what it removed. Waiting for the deletions is the caller's."""
    now = time.time()
    result = SweepResult()
    for ns in api.get("/api/v1/namespaces", labelSelector=run_selector(run_id)).get("items", []):
        name = ns["metadata"]["name"]
        if run_id is None and _age_seconds(ns, now) < older_than:
            continue
        if ns["metadata"].get("deletionTimestamp"):
            continue
        try:
            api.delete(f"/api/v1/namespaces/{name}")
            result.namespaces.append(name)
        except ApiError as exc:
            if exc.status != 404:
                raise
    for node in api.get("/api/v1/nodes", labelSelector=run_selector(run_id)).get("items", []):
        restore_node(api, node["metadata"]["name"])
        result.nodes.append(node["metadata"]["name"])
    log.info("swept namespaces %s, nodes %s", result.namespaces, result.nodes)
    return result
