"""The sweeper removes what a killed run left, and touches nothing without the run label."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.kube.sweeper import RUN_LABEL, TAINTS_ANNOTATION, add_taint, sweep
from lbconform.wait import poll_until

pytestmark = pytest.mark.lab

DEAD_RUN = "deadbeef"
TAINT = {"key": "lbconform.io/test", "value": "x", "effect": "PreferNoSchedule"}


def namespace_phase(api: RawApi, name: str) -> str:
    try:
        return str(api.get(f"/api/v1/namespaces/{name}")["status"]["phase"])
    except ApiError as exc:
        if exc.status == 404:
            return "Gone"
        raise


@pytest.fixture
def unlabelled(kube: RawApi) -> Iterator[str]:
    """A namespace the harness did not make (no run label): the sweeper must leave it."""
    owner = Applier(kube, None)
    owner.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "not-lbconform"}})
    yield "not-lbconform"
    owner.cleanup()


def test_sweep_removes_a_dead_runs_namespaces_and_taints(kube: RawApi, unlabelled: str) -> None:
    Applier(kube, None, {RUN_LABEL: DEAD_RUN}).create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"lbc-{DEAD_RUN}-1"}})
    before = kube.get("/api/v1/nodes/node-3")
    add_taint(kube, "node-3", DEAD_RUN, TAINT)
    node = kube.get("/api/v1/nodes/node-3")
    assert node["metadata"]["labels"][RUN_LABEL] == DEAD_RUN
    assert json.loads(node["metadata"]["annotations"][TAINTS_ANNOTATION]) == [TAINT["key"]]

    result = subprocess.run([sys.executable, "-m", "lbconform.cli", "sweep", "--run-id", DEAD_RUN],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert f"lbc-{DEAD_RUN}-1" in result.stdout and "node-3" in result.stdout
    poll_until(lambda: namespace_phase(kube, f"lbc-{DEAD_RUN}-1") == "Gone", timeout=60, interval=0.5,
               description="the swept namespace to be gone")
    node = kube.get("/api/v1/nodes/node-3")
    assert RUN_LABEL not in node["metadata"].get("labels", {})
    assert TAINTS_ANNOTATION not in node["metadata"].get("annotations", {})
    assert (node["spec"].get("taints") or []) == (before["spec"].get("taints") or [])
    assert namespace_phase(kube, unlabelled) == "Active"
    assert sweep(kube, run_id=DEAD_RUN).namespaces == []
