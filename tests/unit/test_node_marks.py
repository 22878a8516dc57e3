"""The node changes the harness records can be undone exactly: its taints and labels go, the
node's own stay."""

from __future__ import annotations

import json

from lbconform.kube.sweeper import LABELS_ANNOTATION, RUN_LABEL, TAINTS_ANNOTATION, _without_added_marks
from lbconform.target import EXCLUDE_LABEL


def test_only_the_harness_marks_are_removed() -> None:
    node = {"metadata": {"resourceVersion": "7",
                         "labels": {RUN_LABEL: "r1", "own": "x", EXCLUDE_LABEL: ""},
                         "annotations": {TAINTS_ANNOTATION: json.dumps(["added"]),
                                         LABELS_ANNOTATION: json.dumps([EXCLUDE_LABEL])}},
            "spec": {"taints": [{"key": "added"}, {"key": "own"}]}}
    patch = _without_added_marks(node)
    assert patch["metadata"]["labels"] == {RUN_LABEL: None, EXCLUDE_LABEL: None}
    assert patch["metadata"]["annotations"] == {TAINTS_ANNOTATION: None, LABELS_ANNOTATION: None}
    assert patch["spec"]["taints"] == [{"key": "own"}]
    assert patch["metadata"]["resourceVersion"] == "7"
