"""The CI examples users copy and the Sonobuoy plugin: they parse, and they call lbconform as
this version of lbconform understands it (flags, report paths, the pinned Allure)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from lbconform.cli import parser
from lbconform.report.html import ALLURE_VERSION

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = {"lbconform-kind.yaml": "kind", "lbconform-metallb.yaml": "metallb"}


def commands(workflow: dict[str, Any]) -> list[str]:
    """Every shell line of every step, continuation lines joined."""
    lines = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            lines += step.get("run", "").replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip()]


@pytest.mark.parametrize(("name", "provider"), sorted(WORKFLOWS.items()))
def test_workflow_runs_lbconform_with_its_provider_and_uploads_the_reports(name: str, provider: str) -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    lbconform = [shlex.split(c) for c in commands(workflow) if c.startswith("lbconform ")]
    for argv in lbconform:
        parser().parse_args(argv[1:])  # every lbconform command line is one this version accepts
    runs = [a for a in lbconform if a[1] == "run"]
    assert len(runs) == 1 and runs[0][runs[0].index("--provider") + 1] == provider
    assert ["lbconform", "report", "verify", "reports/conformance-report.yaml"] in lbconform
    assert any(c.endswith(f"allure@{ALLURE_VERSION}") and f"allure-{ALLURE_VERSION}" in c
               for c in commands(workflow))
    uploads = [s for job in workflow["jobs"].values() for s in job["steps"]
               if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    paths = uploads[0]["with"]["path"].split()
    assert {"reports/conformance-report.yaml", "reports/html-single/", "reports/summary.md"} <= set(paths)


def test_sonobuoy_plugin_returns_junit_from_lbconform_run() -> None:
    plugin = yaml.safe_load((ROOT / "manifests" / "sonobuoy-plugin.yaml").read_text())
    assert plugin["sonobuoy-config"]["result-format"] == "junit"
    assert plugin["sonobuoy-config"]["plugin-name"] == "lbconform"
    script = plugin["spec"]["args"][0]
    assert "lbconform run --kubeconfig /tmp/kubeconfig" in script
    assert '/junit.xml" > "${results}/done"' in script
    assert {"name": "results", "mountPath": "/tmp/sonobuoy/results"} in plugin["spec"]["volumeMounts"]
