"""The user's path, end to end: the harness installed alone in a fresh virtualenv (no lab code there to
import) runs against the lab as against any cluster, through its kubeconfig, with the generic provider
and a declaration file, the worked example in docs/declarations/. Its verdicts are the lab provider's,
test by test and feature by feature: on the reference LB (core and extended, against the lab
provider's node-mode run) and with a defect switched on (against the lab provider's run of that row).
The runs go on beside the reference runs (``reference_runs`` in ``tests/lab/conftest.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lbconform.report import schema
from lbconform_lab.cluster import Lab
from tests.lab.defect_rows import DECLARED_ROWS, DEFECT_SUITES
from tests.lab.runs import DECLARED_REFERENCE, ReferenceRuns, Result, lbconform_cli, outcome

pytestmark = pytest.mark.lab


def report(report_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    assert schema.validate(doc) == [] and schema.check_statistics(doc) == [], doc
    return doc


def verdicts(doc: dict[str, Any]) -> dict[str, str]:
    """Each test's verdict in a report (passed, failed, notSupported, ...), whichever profile holds it."""
    return {test: verdict for p in doc["profiles"] for verdict, tests in p["tests"].items() for test in tests}


def features(doc: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return {p["name"]: p["features"] for p in doc["profiles"]}


def the_user_path(imported: Result, result: Result, report_dir: Path) -> dict[str, Any]:
    """What every user-path run shows: no lab to import, a cluster's report from the generic
    provider, every declared value the file's."""
    assert imported.returncode != 0 and "No module named 'lbconform_lab'" in imported.stderr, imported.stderr
    doc = report(report_dir)
    assert doc["target"]["kind"] == "cluster" and doc["target"]["provider"] == "generic", doc["target"]
    assert {s["from"] for s in doc["declaredSources"].values()} == {"declaration"}, doc["declaredSources"]
    assert doc["implementation"]["project"] == "reference LB (the lab's)", doc["implementation"]
    return doc


@pytest.mark.parametrize("declared", [DECLARED_REFERENCE])
def test_the_harness_alone_passes_core_and_extended_through_a_declaration(
        lab: Lab, reference_runs: ReferenceRuns, declared: str) -> None:
    """Core and extended pass from the harness alone, with every verdict the lab provider's run gives
    in the lab's node mode (what the declaration declares): the health checks and pools read from the
    objects the LB publishes, the idle timeout and pod pools asked for by the declared annotations.
    The report verifies against its evidence."""
    (imported, result), report_dir = reference_runs.alone.result(declared)
    assert result.returncode == 0, outcome(result)
    doc = the_user_path(imported, result, report_dir)
    assert [p["name"] for p in doc["profiles"]] == ["core", "extended"]
    lab_result, lab_dir = reference_runs.modes.result("node")
    assert lab_result.returncode == 0, outcome(lab_result)
    lab_doc = report(lab_dir)
    assert verdicts(doc) == verdicts(lab_doc)
    assert features(doc) == features(lab_doc)
    verify = lbconform_cli("report", "verify", str(report_dir / "conformance-report.yaml"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "a valid conformance report" in verify.stdout


@pytest.mark.parametrize("declared", DECLARED_ROWS)
def test_the_harness_alone_fails_a_defect_through_a_declaration_as_the_lab_provider_does(
        lab: Lab, reference_runs: ReferenceRuns, declared: str) -> None:
    """With a defect switched on for its run, the user's path fails the tests and the feature the
    defect's row names, as the lab provider's run of that row does, verdict for verdict."""
    (imported, result), report_dir = reference_runs.alone.result(declared)
    assert result.returncode == 1, outcome(result)
    doc = the_user_path(imported, result, report_dir)
    _, tests, feature = DEFECT_SUITES[declared]
    assert {t for t, v in verdicts(doc).items() if v == "failed"} == set(tests), outcome(result)
    lab_result, lab_dir = reference_runs.rows.result(declared)
    lab_doc = report(lab_dir)
    assert verdicts(doc) == verdicts(lab_doc), outcome(result) + outcome(lab_result)
    assert features(doc) == features(lab_doc)
    assert feature.value in {f for p in doc["profiles"] for f in p["features"]["failed"]}
