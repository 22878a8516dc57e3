"""Lab tests: real control plane, real kube-proxy, real kernel. They need root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.lab import LabSession
from tests.lab.defect_rows import PARALLEL_ROWS, row_weight, run_chaos_row, run_row
from tests.lab.runs import (
    CHAOS_PROFILE,
    MODE_RUNS_AT_ONCE,
    ConcurrentRuns,
    ReferenceRuns,
    Result,
    run_chaos_profile,
    run_mode,
    selected_items,
    selected_params,
    selected_runs,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="lab tests need root (network namespaces, nftables)")
        for item in items:
            if "tests/lab" in str(item.fspath):
                item.add_marker(skip)
    # Lifecycle tests boot their own labs: run them before the shared lab exists.
    items.sort(key=lambda i: 0 if i.get_closest_marker("lab_lifecycle") else 1)


@pytest.fixture(scope="session")
def reference_runs(lab_session: LabSession, request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceRuns]:
    """The selected mode runs and defect rows, all started when the first test asks for one: they
    mostly wait on the LB's and the suites' timers, so side by side they take little longer than
    the mode runs alone. Each set is waited for at the end of the session."""
    lab_session.ensure_up()
    with selected_runs(request, tmp_path_factory, "test_core_and_extended_pass_on_the_reference_lb", "mode",
                       run_mode, MODE_RUNS_AT_ONCE) as modes, \
            selected_runs(request, tmp_path_factory, "test_suite_catches_defect", "defect", run_row,
                          PARALLEL_ROWS, weight=row_weight) as rows:
        modes.start_all()
        rows.start_all()
        yield ReferenceRuns(modes, rows)


def run_chaos(name: str, report_dir: Path) -> Result:
    return run_chaos_profile(report_dir) if name == CHAOS_PROFILE else run_chaos_row(name, report_dir)


@pytest.fixture(scope="session")
def chaos_runs(lab_session: LabSession, request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConcurrentRuns[Result]]:
    """The reference LB's chaos profile and the chaos rows of ``test_suites_catch_defects.py``, all
    started when the first test asks for one. Their node kills and restarts are ``exclusive``
    tests, which the cluster's gate runs one at a time whichever run they belong to, so side by
    side the runs' start-ups, the profile's other tests and their namespaces' removal overlap.
    Nothing else may run meanwhile: the lab tests outside these runs do not take the gate."""
    lab_session.ensure_up()
    profile = selected_items(request, "test_chaos_profile_passes_on_the_reference_lb")
    names = [*([CHAOS_PROFILE] if profile else []),
             *selected_params(request, "test_chaos_suite_catches_defect", "defect")]
    runs = ConcurrentRuns(tmp_path_factory.mktemp("chaos-runs"), names, run_chaos, max(len(names), 1))
    try:
        yield runs
    finally:
        runs.wait_all()
