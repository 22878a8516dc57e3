"""The report package: aggregation rules, schema checks, datasheet, Allure files and labels."""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml
from jsonschema import Draft202012Validator

from lbconform.features import PROFILES, Feature
from lbconform.report import allure, conformance, datasheet, schema
from lbconform.report.collector import ReportCollector, one_line, to_result
from lbconform.report.model import (
    DESCRIPTION_PROPERTY,
    MEASUREMENT_PROPERTY,
    Implementation,
    Measurement,
    RunInfo,
    TestResult,
    report_name,
)

pytest_plugins = ["pytester"]

CORE, EXT, CHAOS = "LoadBalancerLifecycle", "BackendPool", "NodeFailure"
LOCAL = "ExternalTrafficPolicyLocal"


def run_info(profiles: tuple[str, ...] = ("core", "extended")) -> RunInfo:
    return RunInfo(
        implementation=Implementation("Example Org", "example-lb", "https://example.org/lb", "1.2.3",
                                      ("lb@example.org",)),
        provider="generic", mode="node", target="cluster", kubernetes_version="v1.36.3",
        nodes=("node-1", "node-2"), date="2026-01-02T03:04:05Z", lbconform_version="0.1.0",
        run_id="r1234", profiles=profiles,
        declared={"health_check_interval": 2.0, "unhealthy_threshold": 2, "notes": {"a": "b"}},
        timeouts={"lb_create": 60.0, "request": 3.0})


def result(name: str, outcome: str, *features: str, message: str = "") -> TestResult:
    return TestResult(nodeid=f"suites/test_x.py::{name}", name=f"test_x::{name}", description="",
                      features=features, outcome=outcome, duration=1.0, message=message)


# --- model ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodeid", "name"), [
    ("suites/test_lifecycle.py::test_ingress", "test_lifecycle::test_ingress"),
    ("suites/core/test_lifecycle.py::TestX::test_y[a/b]", "core/test_lifecycle::TestX::test_y[a/b]"),
    ("../site-packages/suites/test_l.py::test_z", "test_l::test_z"),
    ("test_elsewhere.py::test_z", "test_elsewhere::test_z"),
])
def test_report_name_starts_after_the_suites_folder(nodeid: str, name: str) -> None:
    assert report_name(nodeid) == name


def test_measurement_round_trips_through_its_property() -> None:
    m = Measurement("time_to_unhealthy", 4.2, "s", feature="HealthCheckTransitions", declared=4.0)
    back = Measurement.from_json(m.to_json(), test="t::x")
    assert back == Measurement("time_to_unhealthy", 4.2, "s", "t::x", "HealthCheckTransitions", 4.0)
    assert back.difference == 0.2
    assert Measurement("resets", 3, "count").difference is None
    with pytest.raises(ValueError, match="malformed measurement"):
        Measurement.from_json('{"name": "x", "unit": "s"}', test="t")
    with pytest.raises(ValueError, match="not a finite number"):
        Measurement.from_json('{"name": "x", "value": NaN, "unit": "s"}', test="t")


# --- aggregation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("outcomes", "expected"), [
    (["passed", "passed"], "success"),
    (["passed", "failed", "skipped"], "failure"),
    (["passed", "skipped"], "partial"),
    (["passed", "not-supported"], "partial"),
    ([], "partial"),
])
def test_profile_result(outcomes: list[str], expected: str) -> None:
    assert conformance.profile_result(outcomes) == expected


@pytest.mark.parametrize(("outcomes", "expected"), [
    (["passed", "passed"], "passed"),
    (["passed", "failed"], "failed"),
    (["not-supported", "failed"], "failed"),
    (["not-supported", "not-supported"], "not-supported"),
    (["passed", "not-supported"], "skipped"),
    (["passed", "skipped"], "skipped"),
    (["skipped"], "skipped"),
])
def test_feature_outcome(outcomes: list[str], expected: str) -> None:
    assert conformance.feature_outcome(outcomes) == expected


def sample_results() -> list[TestResult]:
    return [
        result("a", "passed", CORE),
        result("b", "passed", CORE, LOCAL),
        result("c", "failed", LOCAL, message="AssertionError: 3 of 20 requests failed"),
        result("d", "not-supported", EXT, message="not supported: the provider declares no pod pool"),
        result("e", "skipped", "SessionAffinity"),
        result("f", "passed", CORE, CHAOS),   # core and chaos: chaos is not selected
        result("g", "passed", CHAOS),
    ]


def sample_measurements() -> list[Measurement]:
    return [
        Measurement("time_to_unhealthy", 4.25, "s", "test_x::b", "HealthCheckTransitions", 4.0),
        Measurement("resets", 0, "count", "test_x::g", None, None),
        Measurement("idle_timeout", 350.0, "s", "test_x::e", "IdleTimeout", 350.0),
    ]


def sample_report() -> dict[str, Any]:
    return conformance.build(sample_results(), sample_measurements(), run_info())


def test_build_aggregates_tests_and_features_per_selected_profile() -> None:
    doc = sample_report()
    assert [p["name"] for p in doc["profiles"]] == ["core", "extended"]
    core, ext = doc["profiles"]
    assert core["result"] == "failure"
    # test_x::f needs a chaos feature too: it is a chaos test, and chaos was not selected.
    assert core["tests"] == {"passed": ["test_x::a", "test_x::b"], "failed": ["test_x::c"], "errors": [],
                             "skipped": [], "notSupported": []}
    assert core["statistics"] == {"passed": 2, "failed": 1, "errors": 0, "skipped": 0, "notSupported": 0}
    assert core["features"] == {"passed": [CORE], "failed": [LOCAL], "errors": [], "skipped": [],
                                "notSupported": []}
    # Why each test that did not pass did not, where its result says (e was skipped without a word).
    assert core["reasons"] == {"test_x::c": "AssertionError: 3 of 20 requests failed"}
    assert ext["reasons"] == {"test_x::d": "not supported: the provider declares no pod pool"}
    assert ext["result"] == "partial"
    assert ext["statistics"] == {"passed": 0, "failed": 0, "errors": 0, "skipped": 1, "notSupported": 1}
    assert ext["features"] == {"passed": [], "failed": [], "errors": [], "skipped": ["SessionAffinity"],
                               "notSupported": [EXT]}


def test_build_layout_and_measurements() -> None:
    doc = sample_report()
    assert list(doc) == ["apiVersion", "kind", "metadata", "implementation", "target", "declared",
                         "timeouts", "profiles", "measurements"]
    assert doc["apiVersion"] == "lbconform.io/v1alpha1" and doc["kind"] == "ConformanceReport"
    assert doc["metadata"] == {"date": "2026-01-02T03:04:05Z", "runId": "r1234", "lbconformVersion": "0.1.0"}
    assert doc["target"] == {"kind": "cluster", "kubernetesVersion": "v1.36.3", "nodes": ["node-1", "node-2"],
                             "provider": "generic", "mode": "node"}
    assert doc["implementation"]["contact"] == ["lb@example.org"]
    # sorted by feature, measurements of no feature last
    assert [m["name"] for m in doc["measurements"]] == ["time_to_unhealthy", "idle_timeout", "resets"]
    assert doc["measurements"][0] == {"name": "time_to_unhealthy", "value": 4.25, "unit": "s",
                                      "test": "test_x::b", "feature": "HealthCheckTransitions",
                                      "declared": 4.0, "difference": 0.25}


def test_a_profile_without_tests_is_partial() -> None:
    doc = conformance.build([result("a", "passed", CORE)], [], run_info(("core", "chaos")))
    assert [(p["name"], p["result"]) for p in doc["profiles"]] == [("core", "success"), ("chaos", "partial")]
    assert doc["profiles"][1]["statistics"] == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                                                "notSupported": 0}


def test_an_interrupted_run_claims_nothing_either_way() -> None:
    results = [result("a", "passed", CORE), result("b", "failed", CORE)]
    doc = conformance.build(results, [], run_info(("core", "chaos")), interrupted=True)
    assert [p["result"] for p in doc["profiles"]] == ["interrupted", "interrupted"]
    assert doc["profiles"][0]["tests"]["failed"] == ["test_x::b"]
    assert schema.verify(doc) == []


def test_a_profile_whose_tests_broke_but_none_failed_is_an_error_not_a_failure() -> None:
    results = [result("a", "passed", CORE), result("b", "error", CORE, LOCAL)]
    doc = conformance.build(results, [], run_info(("core",)))
    core = doc["profiles"][0]
    assert core["result"] == "error" and core["tests"]["errors"] == ["test_x::b"]
    assert core["features"]["errors"] == sorted([LOCAL, CORE]) and core["statistics"]["errors"] == 1
    assert schema.verify(doc) == []
    failed = conformance.build([*results, result("c", "failed", CORE)], [], run_info(("core",)))
    assert failed["profiles"][0]["result"] == "failure"


def test_written_report_reads_back_in_order(tmp_path: Path) -> None:
    doc = sample_report()
    conformance.write(tmp_path / "r" / "report.yaml", doc)
    text = (tmp_path / "r" / "report.yaml").read_text()
    assert text.startswith("apiVersion: lbconform.io/v1alpha1\nkind: ConformanceReport\nmetadata:\n")
    assert yaml.safe_load(text) == doc


# --- schema -----------------------------------------------------------------------------------------


def test_schema_is_valid_and_names_every_feature_and_profile() -> None:
    doc = schema.schema()
    Draft202012Validator.check_schema(doc)
    assert doc["$defs"]["feature"]["enum"] == [f.value for f in Feature]
    assert doc["$defs"]["profileName"]["enum"] == list(PROFILES)
    assert schema.schema_path().parent.parent.name == "reports"


def test_a_built_report_is_valid() -> None:
    doc = sample_report()
    assert schema.validate(doc) == []
    assert schema.check_statistics(doc) == []
    # and so is the YAML a reader gets
    assert schema.validate(yaml.safe_load(yaml.safe_dump(doc))) == []


def test_a_report_written_without_the_runs_facts_says_what_is_missing() -> None:
    doc = conformance.build([result("a", "passed", CORE)], [], RunInfo.unknown(("core",)))
    assert schema.validate(doc) == ["target.kind: 'unknown' is not one of ['lab', 'cluster']"]


def tampered(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sample_report())
    change(doc)
    return doc


def test_schema_errors_name_the_field() -> None:
    doc = tampered(lambda d: d["profiles"][0].__setitem__("result", "great"))
    assert schema.validate(doc) == [
        "profiles[0].result: 'great' is not one of ['success', 'partial', 'failure', 'error', 'interrupted']"]
    doc = tampered(lambda d: d["metadata"].pop("runId"))
    assert schema.validate(doc) == ["metadata: 'runId' is a required property"]
    doc = tampered(lambda d: d.pop("kind"))
    assert schema.validate(doc) == ["(report): 'kind' is a required property"]
    doc = tampered(lambda d: d["profiles"][1]["statistics"].__setitem__("skipped", -1))
    assert schema.validate(doc) == ["profiles[1].statistics.skipped: -1 is less than the minimum of 0"]
    doc = tampered(lambda d: d["profiles"][1]["features"]["skipped"].append("Teleport"))
    assert [e.split(":")[0] for e in schema.validate(doc)] == ["profiles[1].features.skipped[1]"]
    doc = tampered(lambda d: d["measurements"][0].__setitem__("feature", "Teleport"))
    assert [e.split(":")[0] for e in schema.validate(doc)] == ["measurements[0].feature"]
    doc = tampered(lambda d: d["target"].__setitem__("extra", 1))
    assert schema.validate(doc) == [
        "target: Additional properties are not allowed ('extra' was unexpected)"]
    doc = tampered(lambda d: d["metadata"].__setitem__("date", "yesterday"))
    assert [e.split(":")[0] for e in schema.validate(doc)] == ["metadata.date"]


def test_statistics_must_add_up_and_a_test_has_one_result() -> None:
    doc = tampered(lambda d: d["profiles"][0]["statistics"].__setitem__("passed", 3))
    assert schema.validate(doc) == []
    assert schema.check_statistics(doc) == [
        "profiles[0].statistics.passed: 3 but profiles[0].tests.passed lists 2 test(s)"]
    doc = tampered(lambda d: d["profiles"][0]["tests"]["failed"].append("test_x::a"))
    problems = schema.check_statistics(doc)
    assert "profiles[0].tests: 'test_x::a' is in both passed and failed" in problems
    assert "profiles[0].statistics.failed: 1 but profiles[0].tests.failed lists 2 test(s)" in problems
    doc = tampered(lambda d: d["profiles"][0]["reasons"].update({"test_x::a": "x", "test_x::z": "y"}))
    assert schema.validate(doc) == []
    assert schema.check_statistics(doc) == [
        "profiles[0].reasons: 'test_x::a' is not a test of the profile that did not pass",
        "profiles[0].reasons: 'test_x::z' is not a test of the profile that did not pass"]
    assert schema.check_statistics({"profiles": [None, {"tests": {}}]}) == []
    assert schema.check_statistics("not a report") == []


# --- datasheet --------------------------------------------------------------------------------------


def test_datasheet_table() -> None:
    text = datasheet.render([
        Measurement("resets", 0, "count", "test_x::g|p", None, None),
        Measurement("time_to_unhealthy", 4.2, "s", "test_x::b", "HealthCheckTransitions", 4.0),
        Measurement("idle_timeout", 349.5, "s", "test_x::e", "IdleTimeout", 350.0),
        Measurement("time_to_healthy", 1.23456, "s", "test_x::b", "HealthCheckTransitions", None),
    ], run_info())
    lines = text.splitlines()
    assert lines[0] == "# Datasheet: Example Org example-lb 1.2.3"
    assert "`generic`" in lines[2] and "2026-01-02T03:04:05Z" in lines[2]
    table = lines[lines.index("| measurement | value | unit | declared | difference | test |"):]
    assert table[2:] == [
        "| time_to_healthy | 1.235 | s | — | — | test_x::b |",
        "| time_to_unhealthy | 4.2 | s | 4 | +0.2 | test_x::b |",
        "| idle_timeout | 349.5 | s | 350 | -0.5 | test_x::e |",
        "| resets | 0 | count | — | — | test_x::g\\|p |",
    ]


def test_datasheet_without_measurements() -> None:
    text = datasheet.render([], run_info())
    assert "No measurements were recorded" in text and "|" not in text


@pytest.mark.parametrize(("value", "text"), [
    (3, "3"), (3.0, "3"), (4.2, "4.2"), (0.0134, "0.013"), (1.23456, "1.235"), (0.0004, "0.0004"),
    (-0.5, "-0.5"), (1e6, "1000000"),
])
def test_numbers(value: float, text: str) -> None:
    assert datasheet.number(value) == text


# --- allure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "key", "escaped"), [
    ("kubernetes.version", True, "kubernetes.version"),
    ("a key=b:c", True, "a\\ key\\=b\\:c"),
    (" v1.36 (lab)", False, "\\ v1.36 (lab)"),
    ("a\\b\nc\t#!", False, "a\\\\b\\nc\\t\\#\\!"),
    ("café", False, "caf\\u00E9"),
    ("🙂", False, "\\uD83D\\uDE42"),
])
def test_properties_escaping(text: str, key: bool, escaped: str) -> None:
    assert allure.escape(text, key=key) == escaped


def test_environment_file(tmp_path: Path) -> None:
    path = allure.write_environment(tmp_path / "a" / "allure-results",
                                    {"provider": "generic", "nodes": "node-1, node-2", "url": "http://x:1"})
    assert path.read_text() == "provider=generic\nnodes=node-1, node-2\nurl=http\\://x\\:1\n"
    env = allure.run_environment(run_info())
    assert env["implementation"] == "Example Org example-lb" and env["profiles"] == "core, extended"


def test_label_markers_are_allure_pytests_marker() -> None:
    from allure_pytest.utils import ALLURE_LABEL_MARK  # type: ignore[import-untyped]

    assert allure.LABEL_MARK == ALLURE_LABEL_MARK
    marks = allure.label_markers("core", [CORE, LOCAL], "")
    assert [(m.mark.args, m.mark.kwargs) for m in marks] == [
        (("core",), {"label_type": "epic"}), ((CORE, LOCAL), {"label_type": "feature"})]


LABELLED = """
import pytest
from lbconform.report.allure import attach_json, attach_text

def test_labelled():
    assert attach_json("pool", {"members": ["10.0.0.1"]}) is {attached}

def test_plain():
    assert attach_text("note", "hello") is {attached}
"""

LABEL_CONFTEST = """
from pathlib import Path
from lbconform.report.allure import attach_text, label_markers

def pytest_collection_modifyitems(items):
    for item in items:
        if item.name == "test_labelled":
            for mark in label_markers("core", ["LoadBalancerLifecycle", "ExternalTrafficPolicyLocal"],
                                      "the LB gets an address"):
                item.add_marker(mark)

def pytest_sessionfinish(session):
    # outside any test: must not raise
    Path("late.txt").write_text(str(attach_text("late", "x")))
"""


def test_label_markers_label_a_real_allure_result(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LABEL_CONFTEST)
    pytester.makepyfile(test_labels=LABELLED.replace("{attached}", "True"))
    out = pytester.path / "allure"
    pytester.runpytest_subprocess(f"--alluredir={out}").assert_outcomes(passed=2)
    results = {r["name"]: r for r in (json.loads(p.read_text()) for p in out.glob("*-result.json"))}
    labels = {(lb["name"], lb["value"]) for lb in results["test_labelled"]["labels"]}
    assert {("epic", "core"), ("feature", "LoadBalancerLifecycle"), ("feature", "ExternalTrafficPolicyLocal"),
            ("story", "the LB gets an address")} <= labels
    assert not {lb["name"] for lb in results["test_plain"]["labels"]} & {"epic", "feature", "story"}
    attachment = results["test_labelled"]["attachments"][0]
    assert attachment["name"] == "pool" and attachment["type"] == "application/json"
    assert json.loads((out / attachment["source"]).read_text()) == {"members": ["10.0.0.1"]}
    assert (pytester.path / "late.txt").read_text() == "False"


def test_attachments_without_allure_are_no_ops(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LABEL_CONFTEST)
    pytester.makepyfile(test_labels=LABELLED.replace("{attached}", "False"))
    pytester.runpytest_subprocess().assert_outcomes(passed=2)


# --- collector --------------------------------------------------------------------------------------


def report(when: str, outcome: str, props: Sequence[tuple[str, object]], longrepr: Any = None,
           nodeid: str = "suites/test_s.py::test_a", **extra: Any) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("suites/test_s.py", 1, "test_a"), {}, outcome,  # type: ignore[arg-type]
                             longrepr, when, duration=0.5, user_properties=props, **extra)  # type: ignore[arg-type]


FEATURES = ("lbconform.features", f"{CORE},{LOCAL}")
M1 = (MEASUREMENT_PROPERTY, Measurement("time_to_unhealthy", 4.2, "s", feature=LOCAL, declared=4.0).to_json())


def test_to_result_takes_properties_from_the_latest_phase() -> None:
    base = [FEATURES, (DESCRIPTION_PROPERTY, "The LB gets an address.")]
    res, ms = to_result("suites/test_s.py::test_a", [
        report("setup", "passed", base), report("call", "passed", [*base, M1]),
        report("teardown", "passed", [*base, M1, (MEASUREMENT_PROPERTY, "{broken")])])
    assert res == TestResult("suites/test_s.py::test_a", "test_s::test_a", "The LB gets an address.",
                             (CORE, LOCAL), "passed", 1.5, "")
    assert ms == [Measurement("time_to_unhealthy", 4.2, "s", "test_s::test_a", LOCAL, 4.0)]


def test_to_result_outcomes() -> None:
    skip = ("suites/test_s.py", 3, "Skipped: not supported: BackendPool")
    not_supported = ("lbconform.result", "not-supported")
    res, _ = to_result("n", [report("setup", "skipped", [FEATURES, not_supported], skip),
                             report("teardown", "passed", [])])
    assert (res.outcome, res.message) == ("not-supported", "not supported: BackendPool")
    res, _ = to_result("n", [report("setup", "skipped", [FEATURES], skip)])
    assert res.outcome == "skipped"
    # a cleanup error after a skip or a pass is a failure
    res, _ = to_result("n", [report("setup", "skipped", [FEATURES], skip),
                             report("teardown", "failed", [FEATURES], "RuntimeError: namespace stuck\nmore")])
    assert (res.outcome, res.message) == ("failed", "error in teardown: RuntimeError: namespace stuck")
    res, _ = to_result("n", [report("call", "skipped", [], "tb", wasxfail="known bug")])
    assert (res.outcome, res.message) == ("skipped", "expected to fail: known bug")


def test_one_line() -> None:
    assert one_line("\n  first line  \nsecond") == "first line"
    assert one_line("x" * 300) == "x" * 199 + "…"


def test_collector_writes_everything_even_when_the_run_facts_are_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def lost() -> RunInfo:
        raise ConnectionError("apiserver gone")

    collector = ReportCollector(tmp_path / "out", lost)
    collector.pytest_runtest_logreport(report("call", "passed", [FEATURES, M1]))
    with caplog.at_level(logging.WARNING):
        collector.finish()
    assert "apiserver gone" in caplog.text
    doc = yaml.safe_load((tmp_path / "out" / "conformance-report.yaml").read_text())
    assert doc["profiles"][0]["tests"]["passed"] == ["test_s::test_a"]
    assert doc["target"]["kind"] == "unknown"
    assert "time_to_unhealthy" in (tmp_path / "out" / "datasheet.md").read_text()
    assert (tmp_path / "out" / "allure-results" / "environment.properties").is_file()
    assert [r.outcome for r in collector.results] == ["passed"] and len(collector.measurements) == 1


SUITE = """
import json
import pytest
from lbconform.features import Feature
from lbconform.report.model import Measurement, MEASUREMENT_PROPERTY
from lbconform.wait import LbWaitTimeout, WaitTimeout

@pytest.fixture
def measured_at_teardown(request):
    yield
    m = Measurement("resets", 2, "count", feature="ExternalTrafficPolicyLocal")
    request.node.user_properties.append((MEASUREMENT_PROPERTY, m.to_json()))

@pytest.fixture
def broken_cleanup():
    yield
    raise RuntimeError("namespace never went away")

@pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)
def test_lifecycle(record_property):
    record_property(MEASUREMENT_PROPERTY, Measurement("time_to_ingress", 1.5, "s").to_json())

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL)
def test_local(measured_at_teardown):
    pass

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER)
def test_cluster(broken_cleanup):
    pass

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER)
def test_lb_too_slow():
    raise LbWaitTimeout("the LB's healthy set to be ['a']", 10, ["b"], None)

@pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)
def test_pods_too_slow():
    raise WaitTimeout("deployment x to be available", 90, None, None)

@pytest.mark.features(Feature.HEALTH_CHECK_TRANSITIONS)
def test_health():
    pytest.skip("needs two nodes")

@pytest.mark.features(Feature.BACKEND_POOL)
def test_pool():
    pass
"""

COLLECTOR_CONFTEST = """
from pathlib import Path
from lbconform.report.collector import ReportCollector
from lbconform.report.model import Implementation, RunInfo

def run_info():
    return RunInfo(Implementation("Org", "lb", "https://x", "1"), "generic", "node", "lab", "v1.36.3",
                   ("node-1",), "2026-01-02T03:04:05Z", "0.1.0", "r1", ("core", "extended"))

def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(ReportCollector(Path("out"), run_info), "lbconform-report")
"""


def test_collector_in_a_real_xdist_run(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(COLLECTOR_CONFTEST)
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    result = pytester.runpytest_subprocess("-n", "2", "--provider", "generic", "--junitxml", "junit.xml",
                                           "--profile", "core", "--profile", "extended")
    result.assert_outcomes(passed=3, failed=2, skipped=2, errors=1)
    junit = ElementTree.parse(pytester.path / "junit.xml")
    filed = {(c.get("name"), child.tag) for c in junit.iter("testcase") for child in c
             if child.tag in ("failure", "error")}
    assert filed == {("test_lb_too_slow", "failure"), ("test_pods_too_slow", "error"),
                     ("test_cluster", "error")}
    suite = next(junit.iter("testsuite"))
    assert (suite.get("failures"), suite.get("errors")) == ("1", "2")
    doc = yaml.safe_load((pytester.path / "out" / "conformance-report.yaml").read_text())
    assert schema.validate(doc) == [] and schema.check_statistics(doc) == []
    # and it is what its evidence makes, real tracebacks' messages included
    from lbconform.report import evidence

    assert evidence.check(doc, pytester.path / "out" / "conformance-report.yaml") == evidence.Verdict([])
    core, ext = doc["profiles"]
    # A wait for the LB that ran out is its failure; a broken teardown or a wait for the cluster's
    # pods is an error, not a verdict on the LB.
    assert core["tests"] == {"passed": ["test_suite::test_lifecycle", "test_suite::test_local"],
                             "failed": ["test_suite::test_lb_too_slow"],
                             "errors": ["test_suite::test_cluster", "test_suite::test_pods_too_slow"],
                             "skipped": ["test_suite::test_health"], "notSupported": []}
    assert core["result"] == "failure"
    assert core["features"]["failed"] == ["ExternalTrafficPolicyCluster"]
    assert core["features"]["errors"] == ["LoadBalancerLifecycle"]
    assert ext["tests"]["notSupported"] == ["test_suite::test_pool"] and ext["result"] == "partial"
    assert [(m["name"], m["test"]) for m in doc["measurements"]] == [
        ("resets", "test_suite::test_local"), ("time_to_ingress", "test_suite::test_lifecycle")]
    assert "| resets | 2 | count |" in (pytester.path / "out" / "datasheet.md").read_text()
    env = (pytester.path / "out" / "allure-results" / "environment.properties").read_text()
    assert "target=lab\n" in env


def test_no_report_when_nothing_ran_because_of_a_usage_error(tmp_path: Path) -> None:
    collector = ReportCollector(tmp_path / "out", run_info)
    collector.pytest_sessionfinish(None, pytest.ExitCode.USAGE_ERROR)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


# --- lbconform report / report verify ----------------------------------------------------------------

def lbconform(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbconform.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_report_verify_accepts_a_valid_report_with_its_evidence(tmp_path: Path) -> None:
    from lbconform.report import evidence

    path = tmp_path / "conformance-report.yaml"
    conformance.write(path, sample_report())
    done = lbconform("report", "verify", str(path))
    assert (done.returncode, done.stdout) == (3, ""), "a report without its evidence is never valid"
    doc = sample_report()
    doc["evidence"] = evidence.write(tmp_path / "evidence", sample_results(), sample_measurements(),
                                     run_info())
    conformance.write(path, doc)
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == (f"{path}: a valid conformance report (2 profile(s), 5 test(s)), every "
                                   "outcome as its evidence gives it")


def test_report_verify_rejects_a_tampered_report_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "conformance-report.yaml"
    doc = tampered(lambda d: d["profiles"][0]["statistics"].__setitem__("passed", 3))
    doc["profiles"][1]["result"] = "great"
    path.write_text(yaml.safe_dump(doc))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{path}: profiles[1].result: 'great' is not one of "
        "['success', 'partial', 'failure', 'error', 'interrupted']",
        f"{path}: profiles[0].statistics.passed: 3 but profiles[0].tests.passed lists 2 test(s)"]
    assert done.stderr.strip() == f"lbconform: {path} is not a valid conformance report (2 problem(s))"


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read it"), ("profiles: [unclosed", "not YAML or JSON")])
def test_report_verify_of_an_unreadable_file_is_one_line(tmp_path: Path, content: str | None,
                                                         message: str) -> None:
    path = tmp_path / "report.yaml"
    if content is not None:
        path.write_text(content)
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lbconform: error: {path}: {message}"), lines


@pytest.mark.parametrize("content", [Path("/etc/passwd").read_text() * 3, "", "a: 1\nb: [2]\n", "- x\n- y\n"])
def test_report_verify_of_a_file_that_is_no_report_is_one_short_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(content)
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"lbconform: error: {path} is not a conformance report"), lines
    assert len(lines[0]) <= len(str(path)) + 250, lines[0]


def test_report_verify_quotes_at_most_80_characters_of_a_value(tmp_path: Path) -> None:
    path = tmp_path / "conformance-report.yaml"
    doc = sample_report()
    doc["profiles"] = "x" * 5000
    path.write_text(yaml.safe_dump(doc))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1 and "x" * 70 in done.stdout and "x" * 81 not in done.stdout, done.stdout


def test_summary_lists_profiles_features_failures_and_the_datasheet(tmp_path: Path) -> None:
    conformance.write(tmp_path / "conformance-report.yaml", sample_report())
    (tmp_path / "datasheet.md").write_text("# Datasheet: x\n\n| measurement |\n| --- |\n| resets |\n")
    done = lbconform("report", "--report-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "summary.md").read_text()
    assert "| core | **failure** | 2 | 1 | 0 | 0 | 0 |\n" in text
    assert "| extended | **partial** | 0 | 0 | 0 | 1 | 1 |" in text
    assert "| ExternalTrafficPolicyLocal | failed |" in text and "| BackendPool | not supported |" in text
    assert "Failed:\n\n- `test_x::c`: AssertionError: 3 of 20 requests failed\n" in text
    assert "Not supported:\n\n- `test_x::d`: not supported: the provider declares no pod pool\n" in text
    assert text.rstrip().endswith("| resets |") and "## Datasheet" in text


def test_summary_without_a_report_says_what_to_run(tmp_path: Path) -> None:
    done = lbconform("report", "--report-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"lbconform: error: no conformance-report.yaml in {tmp_path}/: run "
                                   "`lbconform run` first, or name its --report-dir")


def test_the_lab_tests_refuse_a_not_supported_test_without_a_reason() -> None:
    """``not_supported_with_reasons``, which the lab's certifications and mode runs call: a
    provider that raises ``NotSupported()`` with nothing to say fails them."""
    from tests.lab.helpers import not_supported_with_reasons

    said = result("d", "not-supported", EXT, message="not supported: the provider declares no pod pool")
    silent = result("h", "not-supported", EXT, message="not supported:")
    ext = conformance.build([said], [], run_info())["profiles"][1]
    assert not_supported_with_reasons(ext) == {"test_x::d"}
    ext = conformance.build([said, silent], [], run_info())["profiles"][1]
    with pytest.raises(AssertionError, match=r"without a reason: \['test_x::h'\]"):
        not_supported_with_reasons(ext)
