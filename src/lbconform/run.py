"""``lbconform run``: the suites under pytest against a target, and the reports they leave.

Input is checked before anything is made (provider, mode, profiles, features, timeouts,
kubeconfig), so a mistake costs one line and no lab. Without ``--kubeconfig`` the target is
the lab: a running lab is used as it is and left running; otherwise one is booted for the
run and removed afterwards unless ``keep_lab``. pytest runs as a child process (with
pytest-xdist when ``workers`` > 1), so that the suites' imports never mix with this one's.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lbconform import preflight, progress, providers
from lbconform.errors import UsageError
from lbconform.features import PROFILES, parse_features
from lbconform.resources import data_dir

log = logging.getLogger(__name__)

Say = Callable[[str], None]

#: A run id names namespaces (``lbc-RUN-xxxxxx``) and labels: short, lowercase, alphanumeric.
RUN_ID = re.compile(r"[a-z0-9]{1,16}")
#: pytest's exit statuses: every selected test passed, some failed, none was selected.
PYTEST_OK, PYTEST_FAILED, PYTEST_NO_TESTS = 0, 1, 5


@dataclass
class RunOptions:
    kubeconfig: str | None = None
    context: str | None = None
    provider: str = "lab"
    mode: str | None = None
    profiles: list[str] = field(default_factory=lambda: ["core"])
    features: list[str] = field(default_factory=list)
    exempt_features: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    provider_options: list[str] = field(default_factory=list)
    workers: int = 2
    report_dir: Path = Path("reports")
    keep_lab: bool = False
    allow_disruptive: bool = False
    client_address: str | None = None
    run_id: str | None = None
    implementation: dict[str, str] = field(default_factory=dict)
    contacts: list[str] = field(default_factory=list)
    pytest_args: list[str] = field(default_factory=list)


def validate(opts: RunOptions) -> None:
    """Every mistake a user can make on the command line, found before anything is made."""
    from lbconform.target import parse_options

    provider = providers.load(opts.provider)
    if opts.mode is not None:
        provider.set_mode(opts.mode)
    provider.configure(None, parse_options(opts.provider_options))
    unknown = [p for p in opts.profiles if p not in PROFILES]
    if unknown:
        raise UsageError(f"unknown profile {unknown[0]!r}: profiles are {', '.join(PROFILES)}")
    try:
        parse_features(opts.features + opts.exempt_features)
        provider.timeouts().with_overrides(opts.timeouts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if opts.workers < 1:
        raise UsageError(f"-n {opts.workers}: the number of test processes must be at least 1")
    if opts.kubeconfig and not Path(opts.kubeconfig).expanduser().is_file():
        raise UsageError(f"--kubeconfig {opts.kubeconfig}: no such file")
    if opts.kubeconfig and opts.provider == "lab":
        raise UsageError("the lab provider reads the lab's own load balancer: with --kubeconfig, name the "
                         "cluster's provider with --provider (kind, metallb, generic, ...)")
    if opts.run_id is not None and not RUN_ID.fullmatch(opts.run_id):
        raise UsageError(f"--run-id {opts.run_id!r}: use 1 to 16 lowercase letters and digits")
    if opts.context and not opts.kubeconfig:
        raise UsageError("--context needs --kubeconfig")
    if "chaos" in opts.profiles and not opts.allow_disruptive:
        raise UsageError("the chaos profile kills, drains and restarts nodes: "
                         "add --allow-disruptive to run it")


def pytest_argv(opts: RunOptions) -> list[str]:
    report_dir = opts.report_dir.resolve()
    # Locust's pytest plugin stays out: Locust runs only as its own process.
    argv = [sys.executable, "-m", "pytest", str(data_dir("suites")), "-p", "no:cacheprovider",
            "-p", "no:locust", "--provider", opts.provider, "--report-dir", str(report_dir),
            "--alluredir", str(report_dir / "allure-results"), "--clean-alluredir",
            "--junitxml", str(report_dir / "junit.xml"), "-rfEs"]
    if opts.workers > 1:
        argv += ["-n", str(opts.workers), "--dist", "loadgroup"]
    for flag, values in (("--profile", opts.profiles), ("--features", opts.features),
                         ("--exempt-features", opts.exempt_features), ("--lbconform-timeout", opts.timeouts),
                         ("--provider-option", opts.provider_options),
                         ("--implementation-contact", opts.contacts)):
        for value in values:
            argv += [flag, value]
    optional: list[tuple[str, str | None]] = [
        # pytest runs in the suites' folder: a path the user gave is resolved from theirs.
        ("--kubeconfig", str(Path(opts.kubeconfig).expanduser().resolve()) if opts.kubeconfig else None),
        ("--context", opts.context), ("--mode", opts.mode),
        ("--client-address", opts.client_address), ("--run-id", opts.run_id)]
    for flag, given in optional:
        if given:
            argv += [flag, given]
    if opts.allow_disruptive:
        argv.append("--allow-disruptive")
    for name, value in sorted(opts.implementation.items()):
        if value:
            argv += [f"--implementation-{name}", value]
    return argv + opts.pytest_args


def _pytest(argv: list[str], report_dir: Path, say: Say) -> int:
    """The suites' pytest as a child process. On a terminal (not in CI) its output goes to
    ``pytest.log`` and a status line shows progress, then the failures are shown; else pytest
    prints quietly."""
    cwd = data_dir("suites").parent
    if not progress.wanted():
        log.info("running %s", " ".join(argv))
        return subprocess.run([*argv, "-q"], cwd=cwd, check=False).returncode
    report_dir.mkdir(parents=True, exist_ok=True)
    log_path = report_dir / "pytest.log"
    with tempfile.TemporaryDirectory(prefix="lbconform-progress-") as folder, open(log_path, "w") as out:
        env = {**os.environ, progress.ENV: folder}
        code = subprocess.run(argv, cwd=cwd, env=env, stdout=out, check=False).returncode
    lines = log_path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines) - 1)
    for line in lines[start:]:
        say(line)
    say(f"pytest's output: {log_path}")
    return code


def summary(report_dir: Path) -> list[str]:
    """One line per profile from the conformance report, for the terminal."""
    path = report_dir / "conformance-report.yaml"
    if not path.is_file():
        return [f"no conformance report was written ({path})"]
    doc = yaml.safe_load(path.read_text())
    lines = []
    for profile in doc.get("profiles", []):
        st = profile["statistics"]
        lines.append(f"profile {profile['name']}: {profile['result']} ({st['passed']} passed, "
                     f"{st['failed']} failed, {st['skipped']} skipped, {st['notSupported']} not supported)")
        if profile["features"]["failed"]:
            lines.append(f"  failing features: {', '.join(profile['features']['failed'])}")
    return [*lines, f"report: {path}", f"datasheet: {report_dir / 'datasheet.md'}"]


def run(opts: RunOptions, say: Say) -> int:
    validate(opts)
    made = preflight.check_local(opts.report_dir, opts.workers)
    lab = None
    try:
        if opts.kubeconfig:
            preflight.check_cluster(Path(opts.kubeconfig).expanduser(), opts.context)
        else:
            from lbconform.lab.cluster import Lab

            lab = Lab(progress=say)
            if lab.dir.exists():
                say("using the running lab as it is (its LB defects included); it stays running")
                running, lab = lab, None
                preflight.check_cluster(running.dir.kubeconfig, None)
            else:
                report = lab.up()
                say(f"lab booted in {report.total:.1f}s")
    except UsageError:
        preflight.undo(made)
        raise
    for stale in ("conformance-report.yaml", "datasheet.md", "junit.xml"):
        (opts.report_dir / stale).unlink(missing_ok=True)
    try:
        argv = pytest_argv(opts)
        code = _pytest(argv, opts.report_dir.resolve(), say)
    finally:
        if lab is not None and not opts.keep_lab:
            lab.down()
            say("lab removed")
    for line in summary(opts.report_dir.resolve()):
        say(line)
    if code == PYTEST_NO_TESTS:
        raise UsageError("no test was selected: check --profile, --features and any -k expression")
    return {PYTEST_OK: 0, PYTEST_FAILED: 1}.get(code, 2)
