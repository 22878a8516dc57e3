"""A report bound to its evidence: the collector writes results.jsonl, run.json and the declaration
beside the report, and ``report verify`` builds the report again from them, checks every digest,
calls a report without them unverifiable, and answers any file that is no report in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from lbconform.report import conformance, evidence, schema
from lbconform.report.collector import ReportCollector
from lbconform.report.model import MEASUREMENT_PROPERTY, Measurement, RunInfo, TestResult
from tests.unit.test_report import CORE, EXT, LOCAL, report, result, run_info

#: The run's options as the plugin hands them to the collector (``pytest_plugin.run_options``).
OPTIONS: dict[str, Any] = {
    "kubeconfig": "/home/someone/.kube/config", "context": "prod", "provider": "generic", "mode": None,
    "provider_option": [], "declaration": None, "profile": ["core", "extended"], "features": [],
    "exempt_features": ["UDP"], "timeout": ["lb_create=10m"], "allow_disruptive": False,
    "client_address": None, "client_netns": None, "run_id": "r1234", "organization": None,
    "project": None, "url": None, "implementation_version": None, "contact": [], "workers": 2,
    "keyword": None, "markexpr": None}

RESULTS = [
    result("a", "passed", CORE),
    result("b", "passed", CORE, LOCAL),
    result("c", "failed", LOCAL, message="AssertionError: 3 of 20 requests failed"),
    result("d", "not-supported", EXT, message="not supported: the provider declares no pod pool"),
]
MEASUREMENTS = [
    Measurement("time_to_unhealthy", 4.25, "s", "test_x::b", "HealthCheckTransitions", 4.0),
    Measurement("resets", 0, "count", "test_x::c", None, None),
]


def make_run(report_dir: Path, results: Sequence[TestResult] = RESULTS,
             measurements: Sequence[Measurement] = MEASUREMENTS, run: RunInfo | None = None,
             options: dict[str, Any] | None = None) -> Path:
    """A run's report and its evidence in ``report_dir``, as the collector writes them: the report's path."""
    run = run or run_info()
    doc = conformance.build(results, measurements, run)
    doc[evidence.SECTION] = evidence.write(report_dir / evidence.EVIDENCE_DIR, results, measurements, run,
                                           options=OPTIONS if options is None else options)
    conformance.write(report_dir / "conformance-report.yaml", doc)
    return report_dir / "conformance-report.yaml"


def lbconform(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbconform.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def edit(path: Path, change: Callable[[dict[str, Any]], None], to: Path | None = None) -> Path:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    (to or path).write_text(yaml.safe_dump(doc, sort_keys=False))
    return to or path


# --- what the run writes --------------------------------------------------------------------------


def test_the_collector_writes_the_evidence_the_report_names(tmp_path: Path) -> None:
    declaration = tmp_path / "ours.yml"
    declaration.write_text("apiVersion: lbconform.io/v1alpha1\nkind: Declaration\n")
    collector = ReportCollector(tmp_path / "out", run_info, {**OPTIONS, "declaration": str(declaration)})
    m1 = Measurement("time_to_unhealthy", 4.2, "s", feature=LOCAL, declared=4.0).to_json()
    collector.pytest_runtest_logreport(report("call", "passed", [("lbconform.features", CORE),
                                                                (MEASUREMENT_PROPERTY, m1)]))
    collector.pytest_runtest_logreport(report("call", "failed", [("lbconform.features", LOCAL)],
                                              "AssertionError: no", nodeid="suites/test_s.py::test_b"))
    collector.finish()
    out = tmp_path / "out"
    doc = yaml.safe_load((out / "conformance-report.yaml").read_text())
    assert list(doc)[-1] == "evidence"
    named = {f["path"]: f["sha256"] for f in doc["evidence"]["files"]}
    assert sorted(named) == ["declaration.yml", "results.jsonl", "run.json"]
    assert all(evidence.sha256(out / "evidence" / name) == digest for name, digest in named.items())
    assert (out / "evidence" / "declaration.yml").read_bytes() == declaration.read_bytes()
    lines = [json.loads(line) for line in (out / "evidence" / "results.jsonl").read_text().splitlines()]
    assert lines == [
        {"nodeid": "suites/test_s.py::test_a", "outcome": "passed", "message": "", "features": [CORE],
         "description": "", "duration": 0.5, "measurements": [
             {"name": "time_to_unhealthy", "value": 4.2, "unit": "s", "declared": 4.0, "feature": LOCAL}]},
        {"nodeid": "suites/test_s.py::test_b", "outcome": "failed", "message": "AssertionError: no",
         "features": [LOCAL], "description": "", "duration": 0.5, "measurements": []}]
    params = json.loads((out / "evidence" / "run.json").read_text())
    assert params["kind"] == "RunParameters" and params["interrupted"] is False
    assert params["run"]["run_id"] == "r1234" and params["run"]["nodes"] == ["node-1", "node-2"]
    # the submitter's kubeconfig and context stay theirs; the declaration is named by its copy
    assert "kubeconfig" not in params["options"] and "context" not in params["options"]
    assert params["options"]["declaration"] == "declaration.yml"
    assert params["options"]["exempt_features"] == ["UDP"]
    done = lbconform("report", "verify", str(out / "conformance-report.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.endswith("every outcome as its evidence gives it\n")


def test_a_second_run_replaces_the_first_runs_evidence(tmp_path: Path) -> None:
    declaration = tmp_path / "d.json"
    declaration.write_text("{}")
    make_run(tmp_path, options={**OPTIONS, "declaration": str(declaration)})
    assert (tmp_path / "evidence" / "declaration.json").is_file()
    (tmp_path / "evidence" / "notes.txt").write_text("the user's")
    path = make_run(tmp_path, results=RESULTS[:1], measurements=[])
    left = sorted(p.name for p in (tmp_path / "evidence").iterdir())
    assert left == ["notes.txt", "results.jsonl", "run.json"]
    assert lbconform("report", "verify", str(path)).returncode == 0


def test_evidence_reads_back_as_what_the_report_was_built_from(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    found = evidence.read(tmp_path / "evidence")
    assert found.results == tuple(RESULTS) and found.measurements == tuple(MEASUREMENTS)
    assert found.run == run_info() and found.interrupted is False
    assert evidence.check(yaml.safe_load(path.read_text()), path) == evidence.Verdict([])


def test_a_measurement_of_no_test_is_refused() -> None:
    with pytest.raises(ValueError, match="names test 'test_x::z', which has no result"):
        evidence.write(Path("/nonexistent"), RESULTS, [Measurement("m", 1, "s", "test_x::z")], run_info())


# --- report verify: the report against its evidence -------------------------------------------------


def consistent_edit(doc: dict[str, Any]) -> None:
    """test_x::c moved from failed to passed, with everything the old checks add up made to agree."""
    core = doc["profiles"][0]
    core["tests"]["failed"].remove("test_x::c")
    core["tests"]["passed"] = sorted([*core["tests"]["passed"], "test_x::c"])
    core["statistics"].update(passed=3, failed=0)
    core["features"]["failed"].remove(LOCAL)
    core["features"]["passed"] = sorted([*core["features"]["passed"], LOCAL])
    core["reasons"].pop("test_x::c")
    core["result"] = "success"


def test_a_consistently_edited_report_passes_the_old_checks_and_fails_verify(tmp_path: Path) -> None:
    path = edit(make_run(tmp_path), consistent_edit)
    assert schema.verify(yaml.safe_load(path.read_text())) == []  # what verify alone used to check
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{path}: {line}" for line in [
        "profiles[0].result: 'success' but the evidence gives 'failure'",
        "profiles[0].statistics.passed: 3 but the evidence gives 2",
        "profiles[0].statistics.failed: 0 but the evidence gives 1",
        "profiles[0].tests.passed: the evidence says test_x::c failed",
        "profiles[0].reasons['test_x::c']: missing; the evidence gives "
        "'AssertionError: 3 of 20 requests failed'",
        f"profiles[0].features.passed: the evidence says {LOCAL} failed"]]
    assert done.stderr == f"lbconform: {path} is not a valid conformance report (6 problem(s))\n"


def drop_test(doc: dict[str, Any]) -> None:
    doc["profiles"][1]["tests"]["notSupported"] = []
    doc["profiles"][1]["statistics"]["notSupported"] = 0
    doc["profiles"][1]["reasons"] = {}


def drop_measurement(doc: dict[str, Any]) -> None:
    doc["measurements"].pop()


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["measurements"][0].update(value=4.0, difference=0.0),
     ["measurements[0].value: 4.0 but the evidence gives 4.25",
      "measurements[0].difference: 0.0 but the evidence gives 0.25"]),
    (drop_measurement, ["measurements: 'resets' of test 'test_x::c' is missing; the evidence has it"]),
    (drop_test, ["profiles[1].statistics.notSupported: 0 but the evidence gives 1",
                 "profiles[1].tests.notSupported: test_x::d is missing; the evidence says it is not "
                 "supported",
                 "profiles[1].reasons['test_x::d']: missing; the evidence gives "
                 "'not supported: the provider declares no pod pool'"]),
    (lambda d: d["implementation"].update(version="2.0.0"),
     ["implementation.version: '2.0.0' but the evidence gives '1.2.3'"]),
    (lambda d: d["target"].update(kubernetesVersion="v1.99.0"),
     ["target.kubernetesVersion: 'v1.99.0' but the evidence gives 'v1.36.3'"]),
    (lambda d: d["declared"].update(health_check_interval=1.0),
     ["declared.health_check_interval: 1.0 but the evidence gives 2.0"]),
    (lambda d: d["profiles"].pop(),
     ["profiles: the report has ['core'] but the evidence gives ['core', 'extended']"]),
    (lambda d: d["profiles"][0]["tests"]["passed"].append("test_x::zz"),
     ["profiles[0].statistics.passed: 2 but profiles[0].tests.passed lists 3 test(s)",
      "profiles[0].tests.passed: test_x::zz is not in the evidence"]),
], ids=["measurement", "measurement-dropped", "test-dropped", "implementation", "target", "declared",
        "profile-dropped", "test-added"])
def test_every_field_is_checked_against_the_evidence(tmp_path: Path, change: Callable[[dict[str, Any]], None],
                                                     expected: list[str]) -> None:
    path = edit(make_run(tmp_path), change)
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{path}: {line}" for line in expected]


@pytest.mark.parametrize("how", ["no-section", "no-folder", "no-results", "section-without-run"])
def test_a_report_without_its_evidence_is_unverifiable(tmp_path: Path, how: str) -> None:
    path = make_run(tmp_path)
    if how == "no-section":
        edit(path, lambda d: d.pop("evidence"))
    elif how == "no-folder":
        shutil.rmtree(tmp_path / "evidence")
    elif how == "no-results":
        (tmp_path / "evidence" / "results.jsonl").unlink()
    else:
        edit(path, lambda d: d["evidence"]["files"].pop(1))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lbconform: {path} is unverifiable: "), lines
    assert "valid" not in lines[0].replace("unverifiable", "")


def test_an_edited_results_file_fails_its_digest(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    results = tmp_path / "evidence" / "results.jsonl"
    results.write_text(results.read_text().replace('"outcome": "failed"', '"outcome": "passed"'))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    [line] = done.stdout.splitlines()
    assert line.startswith(f"{path}: evidence results.jsonl: sha256 differs (the report says "), line


def test_evidence_edited_with_its_digest_no_longer_makes_the_report(tmp_path: Path) -> None:
    """Edit the file and the digest together: the report is not what the edited evidence makes."""
    path = make_run(tmp_path)
    results = tmp_path / "evidence" / "results.jsonl"
    results.write_text(results.read_text().replace('"outcome": "failed"', '"outcome": "passed"'))
    edit(path, lambda d: d["evidence"]["files"][0].update(sha256=evidence.sha256(results)))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    assert f"{path}: profiles[0].tests.failed: the evidence says test_x::c passed" in done.stdout.splitlines()


def test_evidence_that_is_not_a_runs_is_one_line(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    results = tmp_path / "evidence" / "results.jsonl"
    results.write_text('{"nodeid": "suites/test_x.py::a", "outcome": "great"}\n')
    edit(path, lambda d: d["evidence"]["files"][0].update(sha256=evidence.sha256(results)))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{path}: evidence results.jsonl: line 1: no message, features, description, duration, measurements"]


def test_the_evidence_of_a_report_named_otherwise_is_found_by_its_name_or_named(tmp_path: Path) -> None:
    path = make_run(tmp_path / "run")
    moved = tmp_path / "1.2.3-node-report.yaml"
    shutil.copyfile(path, moved)
    assert lbconform("report", "verify", str(moved)).returncode == 3  # no 1.2.3-node-report/ beside it
    done = lbconform("report", "verify", str(moved), "--evidence", str(tmp_path / "run" / "evidence"))
    assert done.returncode == 0, done.stderr
    shutil.copytree(tmp_path / "run" / "evidence", tmp_path / "1.2.3-node-report")
    assert lbconform("report", "verify", str(moved)).returncode == 0


def test_an_evidence_path_out_of_its_folder_is_refused_by_the_schema(tmp_path: Path) -> None:
    path = edit(make_run(tmp_path), lambda d: d["evidence"]["files"][0].update(path="../../etc/passwd"))
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 1 and done.stdout.startswith(f"{path}: evidence.files[0].path: "), done.stdout


# --- report verify: any file at all ---------------------------------------------------------------


def half(path: Path) -> str:
    text = path.read_text()
    return text[:len(text) // 2]


@pytest.mark.parametrize("kind", ["binary", "latin-1", "nul", "truncated-mid-string", "truncated-at-half",
                                  "declaration", "two-documents", "directory", "missing", "empty", "device",
                                  "deeply-nested", "a-list"])
def test_report_verify_answers_any_file_in_one_line(tmp_path: Path, kind: str) -> None:
    report_path = make_run(tmp_path / "run")
    path = tmp_path / "given.yaml"
    contents: dict[str, bytes | str] = {
        "binary": bytes(range(256)) * 4,
        "latin-1": "implementation: Société\n".encode("latin-1"),
        "nul": "apiVersion: x\x00\n",
        "truncated-mid-string": 'apiVersion: lbconform.io/v1alpha1\nkind: ConformanceReport\n'
                                'metadata: {date: "2026',
        "truncated-at-half": half(report_path),
        "declaration": "apiVersion: lbconform.io/v1alpha1\nkind: Declaration\nfeatures: [UDP]\n",
        "two-documents": "kind: ConformanceReport\n---\nkind: ConformanceReport\n",
        "empty": "",
        "deeply-nested": "[" * 50000,
        "a-list": "- kind: ConformanceReport\n",
    }
    if kind == "directory":
        path = tmp_path / "run"
    elif kind == "device":
        path = Path(os.devnull)
    elif kind != "missing":
        content = contents[kind]
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    done = lbconform("report", "verify", str(path))
    output = (done.stdout + done.stderr).splitlines()
    assert done.returncode != 0 and len(output) == 1, output
    assert "Traceback" not in done.stderr and output[0].startswith(("lbconform: ", f"{path}")), output
    assert len(output[0]) < len(str(path)) + 250, output[0]


def test_an_interrupted_runs_report_verifies_as_interrupted(tmp_path: Path) -> None:
    collector = ReportCollector(tmp_path, run_info, OPTIONS)
    collector.pytest_runtest_logreport(report("call", "passed", [("lbconform.features", CORE)]))
    collector.finish(interrupted=True)
    assert json.loads((tmp_path / "evidence" / "run.json").read_text())["interrupted"] is True
    path = tmp_path / "conformance-report.yaml"
    assert [p["result"] for p in yaml.safe_load(path.read_text())["profiles"]] == ["interrupted"] * 2
    done = lbconform("report", "verify", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    edit(path, lambda d: [p.update(result="success") for p in d["profiles"][:1]])
    done = lbconform("report", "verify", str(path))
    assert done.stdout.splitlines() == [
        f"{path}: profiles[0].result: 'success' but the evidence gives 'interrupted'"]
