"""Lab tests: real control plane, real kube-proxy, real kernel. They need root.

Their fixtures (the lab's own tests', not the suites'): one lab per session, a fresh namespace
per test.

``lab`` boots a lab the first time a test asks for it (or reuses one the user has running,
which it then leaves running); ``no_lab`` gives a test the machine without a lab, for the
lifecycle tests that boot their own. ``test_namespace`` gives each test a namespace labelled
with the run id; what the test made in it is deleted and waited for after the test, whatever
its outcome, and the namespaces themselves at the end of the session (see
``lbconform.kube.namespaces``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lbconform.kube.manifests import Applier
from lbconform.kube.namespaces import TestNamespaces
from lbconform.kube.rawapi import RawApi
from lbconform.pytest_plugin import cluster_share, share_lock_of
from lbconform_lab.cluster import Lab
from tests.lab.beside import MARKER as OWN_LAB
from tests.lab.beside import OPTION as OWN_LABS_BESIDE
from tests.lab.beside import Beside
from tests.lab.defect_rows import (
    PARALLEL_ROWS,
    chaos_row_exclusive_tests,
    exclusive_tests,
    row_exclusive_tests,
    row_weight,
    run_chaos_row,
    run_declared_row,
    run_row,
)
from tests.lab.helpers import LabSession
from tests.lab.runs import (
    CHAOS_PROFILE,
    DECLARED_REFERENCE,
    HARNESS_ALONE,
    MODE_RUNS_AT_ONCE,
    ConcurrentRuns,
    ExclusivesFirst,
    ReferenceRuns,
    Result,
    run_chaos_profile,
    run_declared_reference,
    run_mode,
    selected_items,
    selected_params,
    selected_runs,
)

#: Test namespaces and what they hold are gone within this.
NAMESPACE_TIMEOUT_SECONDS = 120.0



@pytest.fixture(scope="session")
def lab_session() -> Iterator[LabSession]:
    session = LabSession()
    yield session
    session.close()


@pytest.fixture(scope="session")
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def lab(lab_session: LabSession) -> Lab:
    return lab_session.ensure_up()


@pytest.fixture
def no_lab(lab_session: LabSession) -> Iterator[Lab]:
    lab_session.ensure_down()
    yield lab_session.lab
    lab_session.lab.down()


@pytest.fixture
def kube(lab: Lab) -> RawApi:
    return lab.api()


@pytest.fixture(scope="session")
def lab_namespaces(lab_session: LabSession, run_id: str) -> Iterator[TestNamespaces]:
    """The lab tests' namespaces; waits for all of them to be gone at the end (before the lab goes)."""
    namespaces = TestNamespaces(lab_session.ensure_up().api(), run_id, NAMESPACE_TIMEOUT_SECONDS)
    yield namespaces
    namespaces.wait_gone()


@pytest.fixture
def test_namespace(lab: Lab, lab_namespaces: TestNamespaces) -> Iterator[Applier]:
    """An Applier bound to a fresh namespace of this test; everything in it is removed after."""
    applier = lab_namespaces.create()
    try:
        yield applier
    finally:
        lab_namespaces.release(applier)


#: The tests that read the reference runs' results (``reference_runs``).
MODE_TEST, ROW_TEST = "test_core_and_extended_pass_on_the_reference_lb", "test_suite_catches_defect"
ALONE_TEST = "test_the_harness_alone_passes_core_and_extended_through_a_declaration"
DECLARED_ROW_TEST = "test_the_harness_alone_fails_a_defect_through_a_declaration_as_the_lab_provider_does"

#: The order of a session's lab tests: the lifecycle tests boot their own labs, so they go before
#: the shared lab exists; then the reference runs start, and the tests that may go on beside them
#: do; then the tests that read the runs' results; then the rest, once the runs have ended.
LIFECYCLE, BESIDE_RUNS, RUN_RESULTS, AFTER_RUNS = range(4)

_REFERENCE_RUNS = pytest.StashKey[ReferenceRuns]()
_BESIDE = pytest.StashKey[Beside]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(OWN_LABS_BESIDE, action="store_true",
                     help=f"run the tests marked {OWN_LAB} in a second pytest on a lab of their own, beside "
                          "this session's tests once the reference runs have ended (make test)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{OWN_LAB}: boots a lab of its own and needs nothing of the session's; with "
                   f"{OWN_LABS_BESIDE}, runs on a second lab beside the session (tests/lab/beside.py)")
    config.addinivalue_line(
        "markers", "beside_runs: may go on while the reference runs do (the module's tests change only what "
                   "they make, and hold the cluster's share as a suite test does)")
    config.addinivalue_line(
        "markers", "alone: in a beside_runs module, waits until the reference runs have ended: it changes "
                   "what every test sees (restarts the LB, labels a node) or times the LB to the second")


def phase(item: pytest.Item) -> int:
    if item.get_closest_marker("lab_lifecycle"):
        return LIFECYCLE
    if item.get_closest_marker("beside_runs") and not item.get_closest_marker("alone"):
        return BESIDE_RUNS
    if getattr(item, "originalname", "") in (MODE_TEST, ROW_TEST, ALONE_TEST, DECLARED_ROW_TEST):
        return RUN_RESULTS
    return AFTER_RUNS


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session that runs the user's path starts making its virtualenv now, beside the tests
    before the reference runs."""
    if os.geteuid() == 0 and any(getattr(item, "originalname", "") in (ALONE_TEST, DECLARED_ROW_TEST)
                                 for item in session.items):
        HARNESS_ALONE.prepare()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test, before the session's fixtures end and its lab goes down: waits for the
    tests beside, which compare what their own lab leaves with the machine as they found it, this
    session's lab up."""
    beside = item.config.stash.get(_BESIDE, None)
    if nextitem is None and beside is not None:
        beside.wait()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    HARNESS_ALONE.remove()
    beside = session.config.stash.get(_BESIDE, None)
    if beside is None:
        return
    rc, output = beside.finish(interrupted=session.exitstatus == pytest.ExitCode.INTERRUPTED)
    if rc is None:
        return
    print(f"\n===== the tests on a lab of their own ({OWN_LAB}), beside this session: exit {rc} =====",
          output, sep="\n", flush=True)
    if rc != 0 and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="lab tests need root (network namespaces, nftables)")
        for item in items:
            if "tests/lab" in str(item.fspath):
                item.add_marker(skip)
    elif config.getoption(OWN_LABS_BESIDE):
        own = [item for item in items if item.get_closest_marker(OWN_LAB)]
        if own:
            config.hook.pytest_deselected(items=own)
            items[:] = [item for item in items if not item.get_closest_marker(OWN_LAB)]
            config.stash[_BESIDE] = Beside([item.nodeid for item in own], config.rootpath)
    items.sort(key=phase)


@pytest.fixture(autouse=True)
def _in_its_phase(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that goes on beside the reference runs starts them (if this session has not yet) and
    holds the cluster's share meanwhile, as the runs' own tests do: a run's ``exclusive`` test
    (a node excluded or tainted) waits for it, and it for that test. A test after the runs waits
    until every one has ended."""
    item = request.node
    its_phase = phase(item)
    if its_phase == BESIDE_RUNS:
        request.getfixturevalue("reference_runs")
        lab: Lab = request.getfixturevalue("lab")
        with cluster_share(share_lock_of(str(lab.api().api.configuration.host)), exclusive=False):
            yield
        return
    runs = item.config.stash.get(_REFERENCE_RUNS, None)
    if its_phase == AFTER_RUNS:
        if runs is not None:
            runs.wait_all()
        beside = item.config.stash.get(_BESIDE, None)
        if beside is not None and not beside.started:
            # This session's lab is up from the start of the tests beside to their end: they
            # compare what their own lab leaves with the machine as they found it.
            request.getfixturevalue("lab")
            beside.start()
    yield


@pytest.fixture(scope="session")
def reference_runs(lab_session: LabSession, request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceRuns]:
    """The selected mode runs and defect rows, all started when the first test asks for one (the
    first test that goes on beside them, or the first that reads a result): they mostly wait on the
    LB's and the suites' timers, so side by side they take little longer than the mode runs alone.
    The rows without an exclusive test wait until the others' exclusive tests have ended
    (``ExclusivesFirst``). Each set is waited for at the end of the session."""
    lab_session.ensure_up()
    exclusives = ExclusivesFirst()

    def row(name: str, report_dir: Path) -> Result:
        if not row_exclusive_tests(name):
            exclusives.wait()
        return run_row(name, report_dir)

    def declared_run(name: str, report_dir: Path) -> tuple[Result, Result]:
        if name != DECLARED_REFERENCE and not row_exclusive_tests(name):
            exclusives.wait()
        return run_declared(name, report_dir)

    # The user-path runs are compared with the lab provider's: its node-mode run and its rows.
    declared = selected_params(request, (ALONE_TEST, DECLARED_ROW_TEST), "declared")
    with selected_runs(request, tmp_path_factory, MODE_TEST, "mode", run_mode, MODE_RUNS_AT_ONCE,
                       also=["node"] if DECLARED_REFERENCE in declared else []) as modes, \
            selected_runs(request, tmp_path_factory, ROW_TEST, "defect", row, PARALLEL_ROWS,
                          weight=row_weight, also=[d for d in declared if d != DECLARED_REFERENCE]) as rows, \
            selected_runs(request, tmp_path_factory, (ALONE_TEST, DECLARED_ROW_TEST), "declared",
                          declared_run, 2) as alone:
        modes.start_all()
        rows.start_all()
        alone.start_all()
        every = exclusive_tests()
        exclusives.watch(modes, lambda _: every)
        exclusives.watch(rows, row_exclusive_tests)
        exclusives.watch(alone, lambda n: every if n == DECLARED_REFERENCE else row_exclusive_tests(n))
        exclusives.arm()
        runs = request.config.stash[_REFERENCE_RUNS] = ReferenceRuns(modes, rows, alone)
        yield runs


def run_declared(name: str, report_dir: Path) -> tuple[Result, Result]:
    """A user-path run: core and extended on the reference LB, or a declared defect row."""
    if name == DECLARED_REFERENCE:
        return run_declared_reference(report_dir)
    return run_declared_row(name, report_dir)


def run_chaos(name: str, report_dir: Path) -> Result:
    return run_chaos_profile(report_dir) if name == CHAOS_PROFILE else run_chaos_row(name, report_dir)


@pytest.fixture(scope="session")
def chaos_runs(lab_session: LabSession, request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConcurrentRuns[Result]]:
    """The reference LB's chaos profile and the chaos rows of ``test_suites_catch_defects.py``, all
    started when the first test asks for one. Their node kills and restarts are ``exclusive``
    tests, which the cluster's gate runs one at a time whichever run they belong to, so side by
    side the runs' start-ups, the profile's other tests and their namespaces' removal overlap.
    The standalone experiments of ``test_chaos.py`` go on meanwhile through the same gate; the
    lab tests after them do not take it, and start once every chaos run has ended."""
    lab_session.ensure_up()
    profile = selected_items(request, "test_chaos_profile_passes_on_the_reference_lb")
    names = [*([CHAOS_PROFILE] if profile else []),
             *selected_params(request, "test_chaos_suite_catches_defect", "defect")]
    runs = ConcurrentRuns(tmp_path_factory.mktemp("chaos-runs"), names, run_chaos, max(len(names), 1))
    try:
        yield runs
    finally:
        runs.wait_all()


@pytest.fixture(scope="session")
def chaos_exclusives(chaos_runs: ConcurrentRuns[Result]) -> ExclusivesFirst:
    """The chaos runs, started, and a gate that opens once their exclusive tests have ended (for the
    standalone experiments that touch no node: beside the profile's last tests, not between its
    node kills, where every exclusive test would wait for them)."""
    chaos_runs.start_all()
    exclusives = ExclusivesFirst()
    every = exclusive_tests("chaos")
    exclusives.watch(chaos_runs, lambda n: every if n == CHAOS_PROFILE else chaos_row_exclusive_tests(n))
    exclusives.arm()
    return exclusives
