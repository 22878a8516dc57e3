"""The run's preflight against the lab's cluster: an identity that may not do what the suites need
is refused in one line, before any test, and nothing is made in the cluster or written."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lbconform.kube.rawapi import ApiError, RawApi
from lbconform.preflight import REQUIRED_ACCESS
from lbconform_lab.cluster import Lab

pytestmark = pytest.mark.lab


@pytest.fixture
def may_not_create_services(kube: RawApi, lab: Lab, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a ServiceAccount granted everything the suites need but ``create services``."""
    name = f"lbc-preflight-{uuid.uuid4().hex[:6]}"
    rules: list[dict[str, object]] = []
    for access in REQUIRED_ACCESS:
        if (access.verb, access.resource) != ("create", "services"):
            rules.append({"apiGroups": [access.group], "resources": [access.resource],
                          "verbs": [access.verb]})
    made: list[tuple[str, dict[str, Any]]] = [
        ("/api/v1/namespaces/default/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    ]
    try:
        for collection, body in made:
            kube.post(collection, body)
        token = kube.post(f"/api/v1/namespaces/default/serviceaccounts/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600}})["status"]["token"]
        config = copy.deepcopy(yaml.safe_load(lab.dir.kubeconfig.read_text()))
        config["users"] = [{"name": name, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = name
        restricted = tmp_path / "restricted.kubeconfig"
        restricted.write_text(yaml.safe_dump(config))
        yield restricted
    finally:
        for collection, _ in reversed(made):
            try:
                kube.delete(f"{collection}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


def test_an_identity_that_may_not_create_services_is_refused_in_one_line(
        kube: RawApi, may_not_create_services: Path, tmp_path: Path) -> None:
    before = {n["metadata"]["name"] for n in kube.get("/api/v1/namespaces")["items"]}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lbconform.cli", "run", "--provider", "generic",
                           "--kubeconfig", str(may_not_create_services), "--report-dir", "reports"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert time.monotonic() - started < 15
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "identity may not create services in the cluster at https://" in lines[0], lines
    # Nothing made: no namespace that was not there (one an earlier test left terminating may go meanwhile).
    assert {n["metadata"]["name"] for n in kube.get("/api/v1/namespaces")["items"]} - before == set()
    assert not (tmp_path / "reports").exists()
