"""The pytest plugin that turns a run's test reports into the conformance report and datasheet.

Register it in the controller process only (not in pytest-xdist workers): workers send their
TestReports, ``user_properties`` included, to the controller, where
``pytest_runtest_logreport`` sees every phase of every test. At session end it writes
``conformance-report.yaml``, ``datasheet.md`` and Allure's ``environment.properties``, and the
report's evidence in ``evidence/`` (``lbconform.report.evidence``: every test's result as seen
here, the run's parameters, the declaration file), which the report names with their digests. It
never loses results: if the run's facts cannot be had any more (the cluster went away), the
report is written with what is known and a warning is logged; if its evidence cannot be written,
the report is written without it (and ``report verify`` calls it unverifiable).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from lbconform.report import allure, conformance, datasheet, evidence, summary
from lbconform.report.model import (
    DESCRIPTION_PROPERTY,
    ERROR,
    ERROR_PROPERTY,
    FAILED,
    FEATURES_PROPERTY,
    MEASUREMENT_PROPERTY,
    NOT_SUPPORTED,
    PASSED,
    RESULT_PROPERTY,
    SKIPPED,
    Measurement,
    RunInfo,
    TestResult,
    report_name,
)

log = logging.getLogger(__name__)

REPORT_FILE = "conformance-report.yaml"
DATASHEET_FILE = "datasheet.md"
SUMMARY_FILE = "summary.md"
ALLURE_DIR = "allure-results"

MESSAGE_LIMIT = 200


class ReportCollector:
    """Collects every phase's TestReport by nodeid; writes the reports when the session ends.

    ``options`` are the run's options by ``dest`` (``lbconform.options``), for the evidence."""

    def __init__(self, report_dir: Path, run_info: Callable[[], RunInfo],
                 options: Mapping[str, Any] | None = None) -> None:
        self.report_dir = report_dir
        self.run_info = run_info
        self.options = dict(options or {})
        self.results: list[TestResult] = []
        self.measurements: list[Measurement] = []
        self._reports: dict[str, list[pytest.TestReport]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._reports.setdefault(report.nodeid, []).append(report)

    # After the junitxml plugin's own sessionfinish, which writes junit.xml.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
        if not self._reports and exitstatus in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
            # Nothing ran: an empty report would pass for a run that found nothing to test.
            log.info("no test ran (exit status %s): no report written", exitstatus)
            return
        self.finish(allure_dir=_alluredir(session.config),
                    interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        xml = getattr(session.config.option, "xmlpath", None)
        if xml and Path(xml).is_file():
            junit_errors(Path(xml), {r.nodeid for r in self.results if r.outcome == ERROR})

    def finish(self, allure_dir: Path | None = None, interrupted: bool = False) -> None:
        """Turn the collected reports into results and write every report file."""
        self.results, self.measurements = [], []
        for nodeid, reports in self._reports.items():
            result, measurements = to_result(nodeid, reports)
            self.results.append(result)
            self.measurements += measurements
        try:
            run = self.run_info()
        except Exception as exc:
            log.warning("the run's facts are unavailable (%s); the report says 'unknown' for them", exc)
            profiles: set[str] = set()
            for r in self.results:
                profiles |= conformance.profiles_of(r.features)
            run = RunInfo.unknown(tuple(sorted(profiles)))
        self.report_dir.mkdir(parents=True, exist_ok=True)
        doc = conformance.build(self.results, self.measurements, run, interrupted)
        try:
            doc[evidence.SECTION] = evidence.write(
                self.report_dir / evidence.EVIDENCE_DIR, self.results, self.measurements, run,
                interrupted=interrupted, options=self.options)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("the report's evidence could not be written (%s): the report is unverifiable", exc)
        conformance.write(self.report_dir / REPORT_FILE, doc)
        sheet = datasheet.render(self.measurements, run)
        (self.report_dir / DATASHEET_FILE).write_text(sheet, encoding="utf-8")
        (self.report_dir / SUMMARY_FILE).write_text(summary.render(doc, sheet), encoding="utf-8")
        allure.write_environment(allure_dir or self.report_dir / ALLURE_DIR, allure.run_environment(run))
        log.info("wrote %s, %s and %s in %s", REPORT_FILE, DATASHEET_FILE, SUMMARY_FILE, self.report_dir)


def junit_errors(path: Path, nodeids: set[str]) -> None:
    """In ``path`` (pytest's JUnit XML), file the tests in ``nodeids`` as errors, not failures, as
    the conformance report does: pytest's JUnit calls every exception in a test's body a failure."""
    import xml.etree.ElementTree as ET

    if not nodeids:
        return
    wanted = {_junit_address(n) for n in nodeids}
    tree = ET.parse(path)
    changed = False
    for suite in tree.iter("testsuite"):
        moved = 0
        for case in suite.iter("testcase"):
            if (case.get("classname", ""), case.get("name", "")) not in wanted:
                continue
            for child in case:
                if child.tag == "failure":
                    child.tag = "error"
                    moved += 1
        if moved:
            changed = True
            suite.set("failures", str(int(suite.get("failures", "0")) - moved))
            suite.set("errors", str(int(suite.get("errors", "0")) + moved))
    if changed:
        tree.write(path, encoding="utf-8", xml_declaration=True)


def _junit_address(nodeid: str) -> tuple[str, str]:
    """(classname, name) as pytest's junitxml writes a nodeid: the path's ``/`` as dots, no .py."""
    names = nodeid.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    return ".".join(names[:-1]), names[-1]


def _alluredir(config: pytest.Config) -> Path | None:
    """The ``--alluredir`` actually in use, if allure-pytest is loaded and one was given."""
    value = getattr(config.option, "allure_report_dir", None)
    return Path(value) if value else None


def to_result(nodeid: str, reports: list[pytest.TestReport]) -> tuple[TestResult, list[Measurement]]:
    """One test's result and measurements from its phases' reports (setup, call, teardown)."""
    # user_properties only grows during a test: the longest list is the latest and holds all.
    properties = max((r.user_properties for r in reports), key=len, default=[])
    props: dict[str, str] = {}
    raw_measurements: list[str] = []
    errored: set[str] = set()
    for key, value in properties:
        if key == MEASUREMENT_PROPERTY:
            raw_measurements.append(str(value))
        elif key == ERROR_PROPERTY:
            errored.add(str(value))
        else:
            props[str(key)] = str(value)
    name = report_name(nodeid)
    features = tuple(f for f in props.get(FEATURES_PROPERTY, "").split(",") if f)

    # A failed assertion in any phase makes the test failed; phases that only broke make it an error.
    failed = next((r for r in reports if r.failed and r.when not in errored), None)
    broken = next((r for r in reports if r.failed and r.when in errored), None)
    skipped = next((r for r in reports if r.skipped), None)
    if failed is not None:
        outcome, message = FAILED, _failure_message(failed)
    elif broken is not None:
        outcome, message = ERROR, _failure_message(broken)
    elif skipped is not None:
        not_supported = props.get(RESULT_PROPERTY) == NOT_SUPPORTED
        outcome, message = (NOT_SUPPORTED if not_supported else SKIPPED), _skip_message(skipped)
    else:
        outcome, message = PASSED, ""

    measurements: list[Measurement] = []
    for text in raw_measurements:
        try:
            measurements.append(Measurement.from_json(text, test=name))
        except ValueError as exc:
            log.warning("%s: %s", nodeid, exc)
    result = TestResult(nodeid=nodeid, name=name, description=props.get(DESCRIPTION_PROPERTY, ""),
                        features=features, outcome=outcome,
                        duration=sum(r.duration for r in reports), message=message)
    return result, measurements


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or report.longreprtext or "failed"
    prefix = "" if report.when == "call" else f"error in {report.when}: "
    return one_line(prefix + str(text))


def _skip_message(report: pytest.TestReport) -> str:
    reason = getattr(report, "wasxfail", None)
    if reason is not None:
        return one_line(f"expected to fail: {reason}" if reason else "expected to fail")
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        text = str(report.longrepr[2])
    else:
        text = report.longreprtext
    return one_line(text.removeprefix("Skipped: "))


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The first non-empty line, cut at ``limit`` characters with an ellipsis."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"
