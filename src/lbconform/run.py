"""``lbconform run``: the suites under pytest against a target, and the reports they leave.

Input is checked before anything is made (provider, mode, declaration, profiles, features,
timeouts, kubeconfig), so a mistake costs one line and no lab. Without ``--kubeconfig`` the target is
the local cluster (``lbconform.localcluster``: the lab): a running one is used as it is and
left running; otherwise one is booted for the run and removed afterwards unless ``keep_lab``.
pytest runs as a child process (with pytest-xdist when ``workers`` > 1), so that the suites'
imports never mix with this one's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lbconform import options, preflight, progress, providers
from lbconform.declared_provider import apply_declaration
from lbconform.errors import UsageError
from lbconform.features import PROFILES, parse_features
from lbconform.localcluster import kubeconfig_of, the_local_cluster
from lbconform.nsexec import netns_exists
from lbconform.resources import data_dir
from lbconform.signals import Stopped, stoppable

log = logging.getLogger(__name__)

Say = Callable[[str], None]

#: A run id names namespaces (``lbc-RUN-xxxxxx``) and labels: short, lowercase, alphanumeric.
RUN_ID = re.compile(r"[a-z0-9]{1,16}")
#: pytest's exit statuses: every selected test passed, some failed, none was selected.
PYTEST_OK, PYTEST_FAILED, PYTEST_NO_TESTS = 0, 1, 5
#: lbconform run's exit status when tests broke (errors) and none failed: no verdict on the LB.
EXIT_ERRORS = 3


@dataclass
class RunOptions:
    """The run's choices: one field per option of ``lbconform.options`` (by its dest), and the
    ones that stay with ``lbconform run``."""

    kubeconfig: str | None = None
    context: str | None = None
    provider: str | None = None
    mode: str | None = None
    provider_option: list[str] = field(default_factory=list)
    declaration: str | None = None
    profile: list[str] = field(default_factory=lambda: ["core"])
    features: list[str] = field(default_factory=list)
    exempt_features: list[str] = field(default_factory=list)
    timeout: list[str] = field(default_factory=list)
    allow_disruptive: bool = False
    client_address: str | None = None
    client_netns: str | None = None
    run_id: str | None = None
    organization: str | None = None
    project: str | None = None
    url: str | None = None
    implementation_version: str | None = None
    contact: list[str] = field(default_factory=list)
    # lbconform run's own
    workers: int = 2
    report_dir: Path = Path("reports")
    keep_lab: bool = False
    pytest_args: list[str] = field(default_factory=list)


def provider_name(opts: RunOptions) -> str:
    """The provider the user named; without one, the local cluster's own (a run with
    ``--kubeconfig`` must name one: the harness cannot guess a cluster's implementation)."""
    if opts.provider:
        return opts.provider
    if opts.kubeconfig:
        raise UsageError("with --kubeconfig, name the implementation's provider with --provider "
                         f"(installed: {', '.join(sorted(providers.available()))}; generic fits any)")
    return the_local_cluster().default_provider


def validate(opts: RunOptions) -> RunOptions:
    """Every mistake a user can make on the command line, found before anything is made; the
    options with the provider resolved."""
    from lbconform.target import parse_options

    if opts.context and not opts.kubeconfig:
        raise UsageError("--context needs --kubeconfig")
    opts = dataclasses.replace(opts, provider=provider_name(opts))
    assert opts.provider is not None
    provider = providers.load(opts.provider)
    if opts.mode is not None:
        provider.set_mode(opts.mode)
    provider.configure(None, parse_options(opts.provider_option))
    provider.check_target(bool(opts.kubeconfig))
    if opts.declaration:
        provider = apply_declaration(provider, opts.declaration)
    unknown = [p for p in opts.profile if p not in PROFILES]
    if unknown:
        raise UsageError(f"unknown profile {unknown[0]!r}: profiles are {', '.join(PROFILES)}")
    try:
        parse_features(opts.features + opts.exempt_features)
        provider.timeouts().with_overrides(opts.timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if opts.workers < 1:
        raise UsageError(f"-n {opts.workers}: the number of test processes must be at least 1")
    if opts.kubeconfig and not Path(opts.kubeconfig).expanduser().is_file():
        raise UsageError(f"--kubeconfig {opts.kubeconfig}: no such file")
    if opts.client_netns and not netns_exists(opts.client_netns):
        raise UsageError(f"--client-netns {opts.client_netns}: no such network namespace on this machine "
                         "(`ip netns list` names them)")
    if opts.run_id is not None and not RUN_ID.fullmatch(opts.run_id):
        raise UsageError(f"--run-id {opts.run_id!r}: use 1 to 16 lowercase letters and digits")
    if "chaos" in opts.profile and not opts.allow_disruptive:
        raise UsageError("the chaos profile kills, drains and restarts nodes: "
                         "add --allow-disruptive to run it")
    return opts


def pytest_argv(opts: RunOptions) -> list[str]:
    report_dir = opts.report_dir.resolve()
    # Locust's pytest plugin stays out: Locust runs only as its own process.
    argv = [sys.executable, "-m", "pytest", str(data_dir("suites")), "-p", "no:cacheprovider",
            "-p", "no:locust", "--report-dir", str(report_dir),
            "--alluredir", str(report_dir / "allure-results"), "--clean-alluredir",
            "--junitxml", str(report_dir / "junit.xml"), "-rfEs"]
    if opts.workers > 1:
        argv += ["-n", str(opts.workers), "--dist", "loadgroup"]
    values = dataclasses.asdict(opts)
    # pytest runs in the suites' folder: a path the user gave is resolved from theirs.
    for name in ("kubeconfig", "declaration"):
        if values[name]:
            values[name] = str(Path(values[name]).expanduser().resolve())
    return argv + options.pytest_args(values) + opts.pytest_args


class Interrupt:
    """SIGINT and SIGTERM while the suites run. The suites' pytest runs in a process group of its
    own, so that a terminal's Ctrl-C reaches this process only: the first signal is passed on as
    one SIGINT to that group (pytest ends the tests in flight and tears their fixtures down, as on
    a terminal's Ctrl-C), a second one kills the group at once."""

    def __init__(self, say: Say, sweep_hint: str) -> None:
        self.say, self.sweep_hint = say, sweep_hint
        self.signal: int | None = None
        self.killed = False
        self.child: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        child = self.child
        if self.signal is None:
            self.signal = signum
            self.say(f"{signal.Signals(signum).name}: ending the tests in flight and undoing what they made "
                     "(again to stop at once)")
            if child is not None and child.poll() is None:
                os.killpg(child.pid, signal.SIGINT)
            return
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        self.killed = True
        self.say(f"stopped at once: the run's namespaces and node changes may be left: {self.sweep_hint}")

    @property
    def exit_code(self) -> int:
        return 128 + (self.signal or signal.SIGINT)

    def wait(self, argv: list[str], **popen: Any) -> int:
        """Run ``argv`` in its own process group; its exit status."""
        self.child = subprocess.Popen(argv, process_group=0, **popen)
        if self.signal is not None:  # a signal came while the child was being started
            os.killpg(self.child.pid, signal.SIGINT)
        return self.child.wait()


def _pytest(argv: list[str], report_dir: Path, say: Say, interrupt: Interrupt) -> int:
    """The suites' pytest as a child process. On a terminal (not in CI) its output goes to
    ``pytest.log`` and a status line shows progress, then the failures are shown; else pytest
    prints quietly."""
    cwd = data_dir("suites").parent
    if not progress.wanted():
        log.info("running %s", " ".join(argv))
        return interrupt.wait([*argv, "-q"], cwd=cwd)
    report_dir.mkdir(parents=True, exist_ok=True)
    log_path = report_dir / "pytest.log"
    with tempfile.TemporaryDirectory(prefix="lbconform-progress-") as folder, open(log_path, "w") as out:
        env = {**os.environ, progress.ENV: folder}
        code = interrupt.wait(argv, cwd=cwd, env=env, stdout=out)
    lines = log_path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines) - 1)
    for line in lines[start:]:
        say(line)
    say(f"pytest's output: {log_path}")
    return code


def read_report(report_dir: Path) -> dict[str, Any] | None:
    """The run's conformance report, or None when none was written."""
    path = report_dir / "conformance-report.yaml"
    doc: dict[str, Any] | None = yaml.safe_load(path.read_text()) if path.is_file() else None
    return doc


def summary(report_dir: Path, doc: dict[str, Any] | None) -> list[str]:
    """One line per profile from the conformance report ``doc``, for the terminal."""
    path = report_dir / "conformance-report.yaml"
    if doc is None:
        return [f"no conformance report was written ({path})"]
    lines = []
    for profile in doc.get("profiles", []):
        st = profile["statistics"]
        lines.append(f"profile {profile['name']}: {profile['result']} ({st['passed']} passed, "
                     f"{st['failed']} failed, {st.get('errors', 0)} errors, {st['skipped']} skipped, "
                     f"{st['notSupported']} not supported)")
        if profile["features"]["failed"]:
            lines.append(f"  failing features: {', '.join(profile['features']['failed'])}")
    return [*lines, f"report: {path}", f"datasheet: {report_dir / 'datasheet.md'}"]


def run(opts: RunOptions, say: Say) -> int:
    opts = validate(opts)
    made = preflight.check_local(opts.report_dir, opts.workers)
    local = None
    try:
        # A signal while a local cluster boots: its boot tears down what it made (the run's exit is
        # 130 or 143, lbconform.cli).
        with stoppable():
            if opts.kubeconfig:
                preflight.check_cluster(Path(opts.kubeconfig).expanduser(), opts.context)
            else:
                assert opts.provider is not None
                existing = the_local_cluster()
                existing.clear_leftover()
                access = existing.running()
                if access is not None:
                    existing.check_provider(opts.provider)
                    say(f"using the running {existing.name} as it is (its LB defects included); "
                        "it stays running")
                    preflight.check_cluster(access.kubeconfig, None)
                else:
                    local = existing
                    local.boot(opts.provider, say)
    except (UsageError, Stopped):
        preflight.undo(made)
        raise
    for stale in ("conformance-report.yaml", "datasheet.md", "junit.xml"):
        (opts.report_dir / stale).unlink(missing_ok=True)
    # The run id is made here, not in pytest, so that an interrupted run can name what it left.
    opts = dataclasses.replace(opts, run_id=opts.run_id or uuid.uuid4().hex[:8])
    where = f" --kubeconfig {opts.kubeconfig}" if opts.kubeconfig else ""
    hint = f"`lbconform sweep{where} --run-id {opts.run_id}` removes them"
    if local is not None and not opts.keep_lab:
        hint += f"; `lbconform {local.name} down` removes the {local.name} this run booted"
    with Interrupt(say, hint) as interrupt:
        try:
            code = _pytest(pytest_argv(opts), opts.report_dir.resolve(), say, interrupt)
            if interrupt.signal is not None and not interrupt.killed and (local is None or opts.keep_lab):
                sweep_interrupted(opts, say)
        finally:
            if local is not None and not opts.keep_lab and not interrupt.killed:
                local.down()
                say(f"{local.name} removed")
    doc = read_report(opts.report_dir.resolve())
    for line in summary(opts.report_dir.resolve(), doc):
        say(line)
    if interrupt.signal is not None:
        return interrupt.exit_code
    if code == PYTEST_NO_TESTS:
        raise UsageError("no test was selected: check --profile, --features and any -k expression")
    if code == PYTEST_FAILED and only_errors(doc):
        say("no test failed, but some broke on the cluster, the network to it, the lab or the harness: "
            "the run says nothing about the load balancer (see the errors in the report)")
        return EXIT_ERRORS
    return {PYTEST_OK: 0, PYTEST_FAILED: 1}.get(code, 2)


#: How long an interrupted run waits for its namespaces to be gone (the whole stop has 30 s).
UNDO_SECONDS = 20.0


def sweep_interrupted(opts: RunOptions, say: Say) -> None:
    """After an interrupt: whatever the tests in flight left (pytest-xdist ends its workers
    without waiting for their teardown) is swept by the run's label and waited for."""
    from lbconform.kube.rawapi import RawApi, api_client
    from lbconform.kube.sweeper import run_selector, sweep
    from lbconform.wait import poll_until

    assert opts.run_id is not None
    try:
        api = RawApi(api_client(kubeconfig_of(opts.kubeconfig), opts.context))
        swept = sweep(api, run_id=opts.run_id)
        selector = run_selector(opts.run_id)
        poll_until(lambda: not api.get("/api/v1/namespaces", labelSelector=selector)["items"],
                   timeout=UNDO_SECONDS, interval=0.5,
                   description=f"namespaces labelled {selector} to be gone")
    except Exception as exc:  # the cluster may be what went wrong; WaitTimeout says what it saw
        say(f"could not undo everything the run made ({exc}): `lbconform sweep --run-id {opts.run_id}`")
        return
    say(f"undone: namespaces and node changes of run {opts.run_id} are gone"
        + (f" (swept {len(swept.namespaces)} left behind)" if swept.namespaces else ""))


def only_errors(doc: dict[str, Any] | None) -> bool:
    """Whether the run's report has errors and no failure."""
    results = {p.get("result") for p in (doc or {}).get("profiles", [])}
    return "error" in results and "failure" not in results
