"""``lbconform run`` as the lab tests start it: one run, or several against the shared lab at once.

A run is the product's own command line in a child process. Runs that do not disturb one another
(each labels what it makes with its own run id, and the exclusive tests of runs against one
cluster wait for each other) go on side by side: ``ConcurrentRuns`` starts the ones a session
selected together, when the first test asks for a result, and each test waits for its own.
``ReferenceRuns`` holds the longest of them, the mode runs, the defect rows and the harness
installed alone, which all go on at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

#: A whole run of the core and extended profiles must end within this (five minutes alone,
#: more beside other runs).
RUN_SECONDS = 1200

Result = subprocess.CompletedProcess[str]
#: What a run gives back: a finished process, or what a test made of it.
T = TypeVar("T")


#: One thread at a time starts a process, and with fork, not vfork: a run started from a pool
#: thread while other threads ran failed here once with "OSError: [Errno 14] Bad address" on the
#: interpreter's own path (CPython 3.11.7), the child's execve seeing the memory it shares with
#: the parent under vfork changed. ``_USE_VFORK`` is CPython's own switch for this.
_SPAWN = threading.Lock()
subprocess._USE_VFORK = False  # type: ignore[attr-defined]


def lbconform_run(*args: str, report_dir: Path) -> Result:
    argv = [sys.executable, "-m", "lbconform.cli", "run", "--report-dir", str(report_dir), *args]
    with _SPAWN:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:  # as subprocess.run does
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


#: Lines of a failed run's output that say what failed: pytest's summary, the exception lines
#: (without the JSON of the diagnostics dumped under them), and lbconform's own verdicts.
_TELLING = re.compile(r"^(FAILED|ERROR|lbconform:|E\s+[^\s\"{}\[\],])|(passed|failed|error).* in [0-9.]+s")


def outcome(result: Result, lines: int = 80) -> str:
    """What a failed run's output says about why, for an assertion message: the telling lines
    (a run's whole output is mostly diagnostics), then the end of its stderr."""
    telling = [line for line in result.stdout.splitlines() if _TELLING.search(line)]
    return "\n".join(telling[-lines:]) + "\n--- stderr ---\n" + result.stderr[-2000:]


def lbconform_cli(*args: str) -> Result:
    return subprocess.run([sys.executable, "-m", "lbconform.cli", *args], capture_output=True, text=True,
                          timeout=RUN_SECONDS, check=False)


def selected_items(request: pytest.FixtureRequest, test: str | tuple[str, ...]) -> list[pytest.Item]:
    """The items of ``test`` (or of any of several tests) this session runs (after -k and friends)."""
    tests = (test,) if isinstance(test, str) else test
    return [item for item in request.session.items if getattr(item, "originalname", "") in tests]


def selected_params(request: pytest.FixtureRequest, test: str | tuple[str, ...], param: str) -> list[str]:
    """The values of ``param`` of the items of ``test`` (or of several tests) this session runs."""
    return [item.callspec.params[param] for item in selected_items(request, test)
            if hasattr(item, "callspec")]


class ConcurrentRuns(Generic[T]):
    """Named runs, ``start(name, report_dir)`` each, started together on the first ``result``,
    ``parallel`` at a time; each run's report goes to its own folder under ``out``."""

    def __init__(self, out: Path, names: Sequence[str], start: Callable[[str, Path], T],
                 parallel: int) -> None:
        self.out, self.names, self.start = out, list(names), start
        self.pool = ThreadPoolExecutor(parallel, thread_name_prefix="lbconform-run")
        self.runs: dict[str, tuple[Path, Future[T]]] = {}

    def start_all(self) -> None:
        """Every run starts (those started already go on)."""
        if not self.runs:
            for each in self.names:
                self.runs[each] = (self.out / each, self.pool.submit(self.start, each, self.out / each))

    @property
    def started(self) -> bool:
        return bool(self.runs)

    def result(self, name: str) -> tuple[T, Path]:
        self.start_all()
        report_dir, future = self.runs[name]
        return future.result(), report_dir

    def wait_all(self) -> None:
        """Every run has ended (the ones not started yet start now)."""
        self.start_all()
        self.pool.shutdown(wait=True)


@contextmanager
def selected_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  test: str | tuple[str, ...],
                  param: str, start: Callable[[str, Path], T], parallel: int,
                  among: Collection[str] | None = None,
                  weight: Callable[[str], Any] | None = None,
                  also: Collection[str] = ()) -> Iterator[ConcurrentRuns[T]]:
    """The runs of the ``param`` values of ``test`` this session selected (those ``among`` only,
    when given) and ``also`` those, ``parallel`` at a time, each started with ``start``, the heaviest
    first where a ``weight`` says (a long run started last would end alone, after the others);
    waited for when the block ends."""
    names = [n for n in selected_params(request, test, param) if among is None or n in among]
    names += [n for n in also if n not in names]
    if weight is not None:
        names.sort(key=weight, reverse=True)
    runs = ConcurrentRuns(tmp_path_factory.mktemp(f"{param}-runs"), names, start, parallel)
    try:
        yield runs
    finally:
        runs.wait_all()


#: The three mode runs at once (six test processes on two cores): the suites hold on a loaded
#: machine (issue 17: core passed 10 of 10 beside two CPU hogs; later node and nodeport side by
#: side, then pod, 577 s in CI). All three together took 448 s and 459 s in two runs, each
#: passing; the node run is the longest either way. Earlier side-by-side runs failed where the
#: idle bisection's healthy-set change overran its idle period; the idle probe now measures the
#: idle time a slow change stretches.
MODE_RUNS_AT_ONCE = 3


#: Test processes of each mode's run: the node and nodeport runs have the most tests that wait on
#: timers (idle timeouts, health-check transitions, preStop hooks) and are the longest, so they get
#: more (with a third only for node's, nodeport's run ended 124 s after node's in a CI rehearsal).
#: With the idle suites at a minute, a fourth: the lab's two cores were about half busy with three.
MODE_WORKERS = {"node": 4, "nodeport": 4, "pod": 2}


#: The name of the chaos profile's run among the chaos runs (the others are chaos rows' defects).
CHAOS_PROFILE = "chaos-profile"


def run_chaos_profile(report_dir: Path) -> Result:
    """The chaos profile on the reference LB (node mode, three test processes)."""
    return lbconform_run("--profile", "chaos", "--allow-disruptive", "-n", "3", "--mode", "node",
                         report_dir=report_dir)


def run_mode(mode: str, report_dir: Path) -> Result:
    """The core and extended profiles in one lab mode."""
    return lbconform_run("--profile", "core", "--profile", "extended", "-n", str(MODE_WORKERS[mode]),
                         "--mode", mode, report_dir=report_dir)


#: The root of this checkout: what a user installs the harness from.
CHECKOUT = Path(__file__).resolve().parents[2]
#: The worked examples of declaration files, which the user-path runs give ``--declaration``.
DECLARATIONS = CHECKOUT / "docs" / "declarations"
#: A fresh virtualenv's install of the harness and its pinned dependencies (from pip's cache here).
INSTALL_SECONDS = 600
#: The user-path run of core and extended on the reference LB (the others are declared defect rows).
DECLARED_REFERENCE = "reference-lb"


class HarnessAlone:
    """The user's path: a fresh virtualenv with the harness distribution alone installed from this
    checkout (not editable, so the installed wheel's data folders are what runs), made once for
    every run that asks, and ``lbconform run`` from it against the lab through nothing but its
    kubeconfig, with the generic provider, the lab's client namespace named as any network
    namespace would be, and a declaration file. The virtualenv is made in the background from the
    start of a session that will use it (``prepare``), so that the runs do not wait for pip."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._where: Path | None = None
        self._built: Future[Path] | None = None
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def prepare(self) -> None:
        """Start making the virtualenv, unless it is made or being made."""
        with self._lock:
            if self._built is None:
                self._where = Path(tempfile.mkdtemp(prefix="lbconform-harness-alone-"))
                pool = ThreadPoolExecutor(1, thread_name_prefix="harness-alone-venv")
                self._built = pool.submit(self._make, self._where / "venv")
                pool.shutdown(wait=False)

    def _make(self, venv: Path) -> Path:
        with _SPAWN:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=INSTALL_SECONDS,
                           env=self.env)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", str(CHECKOUT)],
                       check=True, capture_output=True, timeout=INSTALL_SECONDS, env=self.env)
        return venv

    def venv(self) -> Path:
        self.prepare()
        assert self._built is not None
        return self._built.result()

    def remove(self) -> None:
        """The virtualenv is gone (once made, or given up on)."""
        with self._lock:
            if self._built is not None:
                wait([self._built])
                assert self._where is not None
                shutil.rmtree(self._where, ignore_errors=True)
                self._where = self._built = None

    def imports_the_lab(self, where: Path) -> Result:
        """What importing the lab there does (it must fail: the lab is not installed)."""
        return subprocess.run([str(self.venv() / "bin" / "python"), "-c", "import lbconform_lab"],
                              capture_output=True, text=True, timeout=60, check=False, env=self.env,
                              cwd=where)

    def run(self, report_dir: Path, declaration: str, *args: str) -> Result:
        from lbconform_lab.state import LabDir
        from lbconform_lab.topology import CLIENT_NS

        argv = [str(self.venv() / "bin" / "lbconform"), "run", "--kubeconfig",
                str(LabDir().kubeconfig), "--provider", "generic", "--client-netns", CLIENT_NS,
                "--declaration", str(DECLARATIONS / declaration), "--report-dir", str(report_dir), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_SECONDS, check=False,
                              env=self.env, cwd=report_dir.parent)


HARNESS_ALONE = HarnessAlone()


def run_declared_reference(report_dir: Path) -> tuple[Result, Result]:
    """Core and extended from the harness alone, the reference LB declared by its worked example;
    with what importing the lab there does."""
    run = HARNESS_ALONE.run(report_dir, "reference-lb.yaml", "--profile", "core", "--profile", "extended",
                            "-n", "3")
    return HARNESS_ALONE.imports_the_lab(report_dir.parent), run


#: The longest the runs without an exclusive test wait for the others' exclusive tests.
EXCLUSIVES_SECONDS = 420.0


class ExclusivesFirst:
    """Until the ``exclusive`` suite tests of the watched runs have ended, the runs that have none
    wait to start. An exclusive test waits, holding the cluster's gate, for every test in to end;
    beside runs that started with minute-long idle probes, the first exclusive tests held every
    run back for 112 s. A run's exclusive tests go first in it (``exclusive_first``), so they
    end early when nothing long is in the way; a test's end shows as its Allure result."""

    def __init__(self) -> None:
        self._watched: list[tuple[Path, Future[Any], Counter[str]]] = []
        self._armed = threading.Event()

    def watch(self, runs: ConcurrentRuns[Any], exclusive: Callable[[str], Counter[str]]) -> None:
        """Watch the started ``runs`` that have ``exclusive`` tests (``module::name``, each with
        its number of parametrizations)."""
        for name, (report_dir, future) in runs.runs.items():
            if tests := exclusive(name):
                self._watched.append((report_dir, future, tests))

    def arm(self) -> None:
        """Every run to watch is watched."""
        self._armed.set()

    def ended(self) -> bool:
        return all(future.done() or not tests - ended_tests(report_dir)
                   for report_dir, future, tests in self._watched)

    def wait(self, timeout: float = EXCLUSIVES_SECONDS) -> None:
        """Return once the watched exclusive tests have ended (or ``timeout`` has passed: then the
        runs go on, only slower)."""
        deadline = time.monotonic() + timeout
        self._armed.wait(timeout)
        while not self.ended() and time.monotonic() < deadline:
            time.sleep(2.0)


def ended_tests(report_dir: Path) -> Counter[str]:
    """The suite tests (``module::name``) a run has results for, each with its number of them
    (one per parametrization), from its Allure results."""
    names: Counter[str] = Counter()
    for result in (report_dir / "allure-results").glob("*-result.json"):
        try:
            full = json.loads(result.read_text()).get("fullName", "")
        except (OSError, ValueError):  # being written
            continue
        module, _, name = full.partition("#")
        names[f"{module.rpartition('.')[2]}::{name}"] += 1
    return names


@dataclass(frozen=True)
class ReferenceRuns:
    """The mode runs of ``test_run.py`` and the defect rows of ``test_suites_catch_defects.py``,
    side by side on the shared reference lab: the rows' defects are scoped to their own runs, so
    the mode runs pass beside them."""

    modes: ConcurrentRuns[Result]
    rows: ConcurrentRuns[Result]
    #: The harness alone, installed as a user installs it, against the lab's kubeconfig through a
    #: declaration: core and extended, and declared defect rows.
    alone: ConcurrentRuns[tuple[Result, Result]]

    def wait_all(self) -> None:
        """Every set has ended (a test that disturbs nodes waits for this)."""
        self.modes.wait_all()
        self.rows.wait_all()
        self.alone.wait_all()
