"""``lbconform report submit``: a verified report and its evidence filed as Gateway API files its
conformance reports, with a README that lists the folder's reports and the command that made each;
and every refusal, in one line."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from lbconform.cli import parser
from lbconform.report import evidence
from lbconform.report.model import Implementation, Measurement, RunInfo
from lbconform.report.submit import command, safe
from tests.unit.test_report import CORE, EXT, LOCAL, result, run_info
from tests.unit.test_report_evidence import OPTIONS, edit, lbconform, make_run

PASSING = [
    result("a", "passed", CORE),
    result("b", "passed", CORE, LOCAL),
    result("d", "not-supported", EXT, message="not supported: the provider declares no pod pool"),
]
MEASURED = [Measurement("time_to_unhealthy", 4.25, "s", "test_x::b", "HealthCheckTransitions", 4.0)]
DECLARATION = "apiVersion: lbconform.io/v1alpha1\nkind: Declaration\nfeatures: [UDP]\n"


def vendor_run(report_dir: Path, *, version: str = "1.2.3", mode: str = "node",
               organization: str = "Example Org", project: str = "example-lb",
               results: list[Any] | None = None) -> Path:
    """A run of a vendor's implementation with a declaration file: the report's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    declaration = report_dir.parent / f"{report_dir.name}-declaration.yaml"
    declaration.write_text(DECLARATION)
    run = dataclasses.replace(
        run_info(), mode=mode,
        implementation=Implementation(organization, project, "https://example.org/lb", version))
    options = {**OPTIONS, "declaration": str(declaration), "mode": mode, "organization": organization or None,
               "project": project or None, "implementation_version": version or None,
               "provider_option": ["pool=a b"], "keyword": "not slow"}
    return make_run(report_dir, PASSING if results is None else results, MEASURED, run, options)


def reproduce_commands(readme: str) -> list[list[str]]:
    """Every ``lbconform run`` command in the README, as the shell splits it."""
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    return [shlex.split(line) for block in blocks
            for line in block.replace("\\\n", " ").splitlines() if line.startswith("lbconform run")]


def test_submit_files_the_report_byte_for_byte_with_its_evidence_and_a_readme(tmp_path: Path) -> None:
    path = vendor_run(tmp_path / "run")
    done = lbconform("report", "submit", "--report-dir", str(tmp_path / "run"),
                     "--into", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "out" / "0.1.0" / "example-org-example-lb"
    assert sorted(p.name for p in folder.iterdir()) == [
        "1.2.3-node-report", "1.2.3-node-report.yaml", "README.md"]
    assert (folder / "1.2.3-node-report.yaml").read_bytes() == path.read_bytes()
    assert sorted(p.name for p in (folder / "1.2.3-node-report").iterdir()) == [
        "declaration.yaml", "results.jsonl", "run.json"]
    assert done.stdout.splitlines() == [f"report: {folder / '1.2.3-node-report.yaml'}",
                                        f"evidence: {folder / '1.2.3-node-report'}/",
                                        f"README: {folder / 'README.md'}"]
    verify = lbconform("report", "verify", str(folder / "1.2.3-node-report.yaml"))
    assert verify.returncode == 0, verify.stdout + verify.stderr

    readme = (folder / "README.md").read_text()
    assert readme.startswith("# Example Org example-lb\n\n<https://example.org/lb>\n")
    assert ("| lbconform version | implementation version | mode | profiles | report |\n"
            "| --- | --- | --- | --- | --- |\n"
            "| 0.1.0 | 1.2.3 | node | core: success, extended: partial | "
            "[1.2.3-node-report.yaml](./1.2.3-node-report.yaml) |\n") in readme
    assert "## Reproduce" in readme and "pip install 'lbconform==0.1.0'\n" in readme
    [argv] = reproduce_commands(readme)
    args = parser().parse_args(argv[1:])
    assert (args.kubeconfig, args.provider, args.mode) == ("K", "generic", "node")
    assert (folder / args.declaration).read_text() == DECLARATION  # run from the README's folder
    assert args.declaration == "1.2.3-node-report/declaration.yaml"
    assert args.profile == ["core", "extended"]
    assert (args.exempt_features, args.timeout) == (["UDP"], ["lb_create=10m"])
    assert (args.organization, args.project) == ("Example Org", "example-lb")
    assert args.implementation_version == "1.2.3"
    assert args.provider_option == ["pool=a b"] and args.workers == 2
    assert args.pytest_args == ["--", "-k", "not slow"]
    # what names the submitter's own cluster and run is not repeated
    assert args.run_id is None and args.context is None and "/home/someone" not in readme


def test_a_second_version_or_mode_adds_a_row_to_the_folders_readme(tmp_path: Path) -> None:
    vendor_run(tmp_path / "first")
    assert lbconform("report", "submit", "--report-dir", str(tmp_path / "first"),
                     "--into", str(tmp_path / "out")).returncode == 0
    folder = tmp_path / "out" / "0.1.0" / "example-org-example-lb"
    readme = folder / "README.md"
    title, rest = readme.read_text().split("\n", 1)
    readme.write_text(f"{title}\n\nMaintained by the example-lb team.\n{rest}\nA note at the end.\n")
    vendor_run(tmp_path / "second", version="1.3.0", mode="Pod Mode")
    done = lbconform("report", "submit", "--report-dir", str(tmp_path / "second"),
                     "--into", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [
        "1.2.3-node-report", "1.2.3-node-report.yaml", "1.3.0-pod-mode-report", "1.3.0-pod-mode-report.yaml",
        "README.md"]
    text = readme.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 0.1.0 |")]
    assert rows == [
        "| 0.1.0 | 1.2.3 | node | core: success, extended: partial | "
        "[1.2.3-node-report.yaml](./1.2.3-node-report.yaml) |",
        "| 0.1.0 | 1.3.0 | Pod Mode | core: success, extended: partial | "
        "[1.3.0-pod-mode-report.yaml](./1.3.0-pod-mode-report.yaml) |"]
    assert text.count("## Reports") == 1 and text.count("# Example Org example-lb") == 1
    assert "Maintained by the example-lb team." in text and text.endswith("A note at the end.\n")
    assert [a[a.index("--declaration") + 1] for a in reproduce_commands(text)] == [
        "1.2.3-node-report/declaration.yaml", "1.3.0-pod-mode-report/declaration.yaml"]


def test_the_same_version_and_mode_again_is_refused_unless_replaced(tmp_path: Path) -> None:
    vendor_run(tmp_path / "run")
    argv = ("report", "submit", "--report-dir", str(tmp_path / "run"), "--into", str(tmp_path / "out"))
    assert lbconform(*argv).returncode == 0
    done = lbconform(*argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "pass --replace" in done.stderr
    assert lbconform(*argv, "--replace").returncode == 0
    readme = (tmp_path / "out" / "0.1.0" / "example-org-example-lb" / "README.md").read_text()
    assert len([line for line in readme.splitlines() if line.startswith("| 0.1.0 |")]) == 1


def test_report_before_submit_takes_the_report_dir_either_way(tmp_path: Path) -> None:
    vendor_run(tmp_path / "run")
    done = lbconform("report", "--report-dir", str(tmp_path / "run"), "submit",
                     "--into", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr


def refused(tmp_path: Path, how: str) -> Path:
    run = tmp_path / "run"
    if how == "no report":
        run.mkdir()
    elif how == "edited":
        edit(vendor_run(run), lambda d: d["implementation"].update(version="9.9.9"))
    elif how == "no evidence":
        vendor_run(run)
        for name in ("results.jsonl", "run.json"):
            (run / "evidence" / name).unlink()
    elif how == "failed":
        vendor_run(run, results=[*PASSING, result("c", "failed", LOCAL, message="AssertionError: no")])
    elif how == "no organization":
        vendor_run(run, organization="")
    elif how == "no organization or project":
        vendor_run(run, organization="", project="")
    elif how == "no version":
        vendor_run(run, version="")
    elif how == "unnameable version":
        vendor_run(run, version="+++")
    return run


@pytest.mark.parametrize(("how", "says"), [
    ("no report", "no conformance-report.yaml in "),
    ("edited", "does not verify (implementation.version: '9.9.9' but the evidence gives '1.2.3')"),
    ("no evidence", "is unverifiable (its evidence is missing: "),
    ("failed", ": core is failure: only success and partial results are submitted"),
    ("no organization", "the report has no implementation.organization: run with --organization, or give "
                        "implementation.organization in the declaration file (--declaration)"),
    ("no organization or project", "the report has no implementation.organization and "
                                   "implementation.project: run with --organization and --project"),
    ("no version", "run with --implementation-version, or give implementation.version in the declaration"),
    ("unnameable version",
     "the report's implementation.version '+++' has no letter or digit to name a file by"),
])
def test_a_report_that_cannot_be_submitted_is_refused_in_one_line(tmp_path: Path, how: str,
                                                                  says: str) -> None:
    run = refused(tmp_path, how)
    done = lbconform("report", "submit", "--report-dir", str(run), "--into", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbconform: error: ") and says in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("text", "name"), [
    ("Example Org", "example-org"), ("v1.2.3+build/7", "v1.2.3-build-7"), ("ACME, Inc.", "acme-inc"),
    ("../..", ""), ("Ünïcode LB", "n-code-lb"), ("1.2.3", "1.2.3"), ("--x--", "x")])
def test_names_are_made_safe_for_paths(text: str, name: str) -> None:
    assert safe(text) == name


def test_a_lab_run_reproduces_without_a_kubeconfig_and_with_the_runs_own_choices(tmp_path: Path) -> None:
    run = dataclasses.replace(run_info(("core",)), provider="lab", mode="pod", target="lab")
    evidence.write(tmp_path, PASSING[:2], [], run, options={"provider": "lab", "workers": 1, "profile": []})
    found = evidence.read(tmp_path)
    assert command(found, None) == "lbconform run --provider lab --mode pod --profile core -n 1"
    unnamed = dataclasses.replace(found, options={}, run=dataclasses.replace(run, mode="default"))
    assert command(unnamed, None) == "lbconform run --provider lab --profile core"


def test_a_long_command_is_folded_for_the_shell(tmp_path: Path) -> None:
    run: RunInfo = run_info()
    options = {**OPTIONS, "features": ["UDP", "SessionAffinity"],
               "contact": ["a@example.org", "b c@example.org"], "allow_disruptive": True, "url": "https://example.org/a-long-path/that-goes-on"}
    evidence.write(tmp_path, PASSING[:1], [], run, options=options)
    text = command(evidence.read(tmp_path), None)
    lines = text.split(" \\\n")
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines), text
    assert all(line.startswith("    --") or line.startswith("    -n") for line in lines[1:]), text
    args = parser().parse_args(shlex.split(text.replace("\\\n", " "))[1:])
    assert args.contact == ["a@example.org", "b c@example.org"] and args.allow_disruptive


def test_a_readme_without_the_markers_keeps_its_text_and_gets_the_table_after_it(tmp_path: Path) -> None:
    from lbconform.report.submit import BEGIN, END

    vendor_run(tmp_path / "run")
    folder = tmp_path / "out" / "0.1.0" / "example-org-example-lb"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("# Example LB\n\nOur own words.\n")
    assert lbconform("report", "submit", "--report-dir", str(tmp_path / "run"),
                     "--into", str(tmp_path / "out")).returncode == 0
    text = (folder / "README.md").read_text()
    assert text.startswith(f"# Example LB\n\nOur own words.\n\n{BEGIN}\n## Reports\n")
    assert text.endswith(f"{END}\n")


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    vendor_run(tmp_path / "run")
    (tmp_path / "out").write_text("a file, not a folder")
    done = lbconform("report", "submit", "--report-dir", str(tmp_path / "run"),
                     "--into", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.startswith(f"lbconform: error: --into {tmp_path / 'out'}: "
                                                           "cannot write there")
    assert done.stderr.count("\n") == 1
