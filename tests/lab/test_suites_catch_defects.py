"""Every applicable defect of the reference LB makes a named conformance test fail, and the
report names the failing feature: the table of ``tests/lab/defect_rows.py`` is checked row by row,
through ``lbconform run`` against the running lab with the defect switched on.

Each row is a run of its own, its defect switched on for that run's Services only: the rows of the
flow and pool defects run side by side, ``PARALLEL_ROWS`` at a time, beside the mode runs of
``test_run.py``, and each row's test waits for its own run. The chaos rows kill nodes and restart
the LB: they run beside the chaos profile's run of ``test_chaos.py`` only (``chaos_runs`` in
conftest.py), whose disruptive tests take the cluster's gate as theirs do."""

from __future__ import annotations

import pytest
import yaml

from lbconform_lab.lb.params import DEFECTS
from tests.lab.defect_rows import CHAOS_DEFECT_SUITES, DEFECT_SUITES
from tests.lab.runs import ConcurrentRuns, ReferenceRuns, Result, outcome

pytestmark = pytest.mark.lab


def test_every_defect_is_in_the_table() -> None:
    """Every defect has a row, in the flow and pool table or the chaos one (where only a chaos
    test can show it)."""
    assert set(DEFECT_SUITES) | set(CHAOS_DEFECT_SUITES) == set(DEFECTS)


@pytest.mark.parametrize("defect", sorted(DEFECT_SUITES))
def test_suite_catches_defect(reference_runs: ReferenceRuns, defect: str) -> None:
    _, tests, feature = DEFECT_SUITES[defect]
    result, report_dir = reference_runs.rows.result(defect)
    assert result.returncode == 1, outcome(result)
    doc = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    failed = {t for p in doc["profiles"] for t in p["tests"]["failed"]}
    failing_features = {f for p in doc["profiles"] for f in p["features"]["failed"]}
    assert failed == set(tests), outcome(result)
    assert feature.value in failing_features


@pytest.mark.parametrize("defect", sorted(CHAOS_DEFECT_SUITES))
def test_chaos_suite_catches_defect(reference_runs: ReferenceRuns, chaos_runs: ConcurrentRuns[Result],
                                    defect: str) -> None:
    if not chaos_runs.started:  # with the chaos profile's run they start in test_chaos.py, before these
        reference_runs.wait_all()  # a node kill would fail the other runs' tests
    tests, shows = CHAOS_DEFECT_SUITES[defect]
    result, report_dir = chaos_runs.result(defect)
    chaos_runs.wait_all()  # the tests after these do not take the cluster's gate
    assert result.returncode == 1, outcome(result)
    doc = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    failed = {t for p in doc["profiles"] for t in p["tests"]["failed"]}
    assert failed == set(tests), outcome(result)
    assert any(s in result.stdout for s in shows), outcome(result)
