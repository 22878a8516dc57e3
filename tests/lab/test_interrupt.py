"""Runs that do not end on their own: stopped by Ctrl-C or SIGTERM, a run ends within 30 s with
130 or 143, the tests in flight end and what they made is gone, a lab the run booted is removed,
and the report says the run was interrupted (the signal goes to the run's process group, as a
terminal's Ctrl-C and a cancelled CI job send it). A lab's boot stopped at any of its steps, by
``lab up`` or by the run that boots it, ends as soon and leaves nothing. A run whose cluster goes
away is an error, not a failure of the LB."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from lbconform.kube.rawapi import ApiError, RawApi, api_client
from lbconform.kube.sweeper import run_selector
from lbconform.wait import poll_until
from lbconform_lab import procs
from lbconform_lab.cluster import Lab
from lbconform_lab.netns import list_netns
from lbconform_lab.topology import PREFIX
from tests.lab.runs import outcome
from tests.lab.test_lifecycle import assert_nothing_left, root_namespace_snapshot

pytestmark = pytest.mark.lab

#: The issue's bound: from the signal to the run's exit.
STOP_SECONDS = 30
#: A core run whose apiserver is gone ends on its own within this (its waits run out one by one).
GONE_RUN_SECONDS = 600
#: How long the signal comes after the run's first namespace: its tests are then mid-wait.
IN_FLIGHT_SECONDS = 5


class RunEnded(Exception):
    """The run under test ended on its own before the test could stop it."""


def start_run(run_id: str, report_dir: Path, *args: str) -> subprocess.Popen[str]:
    """``lbconform run --profile core`` in a process group of its own, as a shell starts a job."""
    argv = [sys.executable, "-m", "lbconform.cli", "run", "--profile", "core", "-n", "2", "--run-id", run_id,
            "--report-dir", str(report_dir), *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0)


def run_namespaces(lab: Lab, run_id: str) -> list[str]:
    api = RawApi(api_client(lab.dir.kubeconfig))
    found = api.get("/api/v1/namespaces", labelSelector=run_selector(run_id))["items"]
    return [n["metadata"]["name"] for n in found]


def wait_for_tests_in_flight(lab: Lab, run_id: str, proc: subprocess.Popen[str], timeout: float) -> None:
    """Until the run has namespaces of its own (its tests are making things), then IN_FLIGHT_SECONDS
    more, so that the signal meets tests inside their waits rather than at their start."""

    def in_flight() -> bool:
        if proc.poll() is not None:
            raise RunEnded(f"the run ended ({proc.returncode}) before it was interrupted")
        return lab.dir.kubeconfig.is_file() and bool(run_namespaces(lab, run_id))

    # Until the lab the run boots answers, its kubeconfig is absent or its apiserver refuses.
    poll_until(in_flight, timeout=timeout, interval=0.5, retry_on=(ConfigException, ApiError, HTTPError),
               description=f"namespaces labelled {run_selector(run_id)}")
    time.sleep(IN_FLIGHT_SECONDS)


def stop_run(lab: Lab, run_id: str, report_dir: Path, sig: signal.Signals,
             timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """A core run started, let its tests get in flight, then ``sig`` to its process group: how it
    ended, and how long after the signal."""
    proc = start_run(run_id, report_dir)
    wait_for_tests_in_flight(lab, run_id, proc, timeout)
    os.killpg(proc.pid, sig)
    sent = time.monotonic()
    try:
        out, err = proc.communicate(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the run did not stop within {STOP_SECONDS}s of {sig.name}:\n"
                             f"{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - sent


def assert_reported_interrupted(report_dir: Path) -> None:
    doc = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    assert [p["result"] for p in doc["profiles"]] == ["interrupted"], doc["profiles"]
    assert "| core | **interrupted** |" in (report_dir / "summary.md").read_text()


@pytest.mark.lab_lifecycle
def test_ctrl_c_stops_a_run_and_removes_the_lab_it_booted(no_lab: Lab, tmp_path: Path) -> None:
    result, took = stop_run(no_lab, "sigint", tmp_path, signal.SIGINT, timeout=300)
    assert result.returncode == 130, outcome(result)
    assert "SIGINT: ending the tests in flight" in result.stderr, outcome(result)
    assert "lab removed" in result.stderr, outcome(result)
    assert not no_lab.dir.exists() and not {n for n in list_netns() if n.startswith(PREFIX)}, \
        "the lab the run booted is still there"
    assert_reported_interrupted(tmp_path)
    print(f"stopped {took:.1f}s after SIGINT")


def test_sigterm_stops_a_run_and_undoes_its_tests(lab: Lab, tmp_path: Path) -> None:
    result, took = stop_run(lab, "sigterm", tmp_path, signal.SIGTERM, timeout=120)
    assert result.returncode == 143, outcome(result)
    assert run_namespaces(lab, "sigterm") == [], "the interrupted run left namespaces"
    assert lab.dir.exists(), "a run must leave a lab it did not boot running"
    assert_reported_interrupted(tmp_path)
    print(f"stopped {took:.1f}s after SIGTERM")


@pytest.mark.lab_lifecycle
def test_a_cluster_that_goes_away_mid_run_is_an_error_not_a_failure(no_lab: Lab, tmp_path: Path) -> None:
    """The lab's apiserver killed while the core profile runs: the tests that were to talk to it
    break (errors), none fails, and the run says in one line that it says nothing about the LB."""
    proc = start_run("gone", tmp_path, "--timeout", "namespace_delete=15s")
    wait_for_tests_in_flight(no_lab, "gone", proc, timeout=300)
    apiserver = no_lab.dir.read().processes["kube-apiserver"]
    assert procs.signal_process(apiserver, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=GONE_RUN_SECONDS)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert proc.returncode == 3, outcome(result)
    doc = yaml.safe_load((tmp_path / "conformance-report.yaml").read_text())
    core = doc["profiles"][0]
    assert core["result"] == "error" and core["statistics"]["failed"] == 0, core
    assert core["statistics"]["errors"] > 0
    assert "no test failed, but some broke on the cluster" in err, err[-3000:]


#: Where the boots are stopped: the step the boot has just begun (its progress line), and the
#: signal. Each command meets both signals; the steps go from namespaces being made to nodes
#: registering, with the control plane's processes running between.
BOOT_STOPS = {
    "lab up": [("network", signal.SIGINT), ("apiserver", signal.SIGTERM), ("nodes", signal.SIGINT)],
    "run": [("apiserver", signal.SIGINT), ("nodes", signal.SIGTERM)],
}


def stop_boot(argv: list[str], step: str, sig: signal.Signals, later: float = 0.0) -> tuple[int, str, float]:
    """``argv`` started in a process group of its own, ``sig`` to the group as the boot begins
    ``step`` (or ``later`` seconds after): its exit code, its stderr, and how long it took to end
    after the signal."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            process_group=0)
    assert proc.stderr is not None
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.strip() == f"lbconform: {step}...":
                break
        else:
            raise AssertionError(f"the boot ended ({proc.wait()}) before step {step}: {''.join(seen)}")
        time.sleep(later)
        os.killpg(proc.pid, sig)
        sent = time.monotonic()
        err = proc.communicate(timeout=STOP_SECONDS)[1]
        return proc.returncode, "".join(seen) + err, time.monotonic() - sent
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{' '.join(argv[2:4])} did not end within {STOP_SECONDS}s of {sig.name} at "
                             f"{step}: {''.join(seen)}") from None


@pytest.mark.lab_lifecycle
@pytest.mark.parametrize(("command", "step", "sig"), [
    (command, step, sig) for command, stops in BOOT_STOPS.items() for step, sig in stops],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else str(v).replace(" ", "-"))
def test_a_boot_stopped_at_any_step_ends_at_once_and_leaves_nothing(no_lab: Lab, tmp_path: Path, command: str,
                                                                     step: str, sig: signal.Signals) -> None:
    before = root_namespace_snapshot()
    reports = tmp_path / "reports"
    argv = [sys.executable, "-m", "lbconform.cli", *(
        ["lab", "up"] if command == "lab up" else
        ["run", "--profile", "core", "-n", "2", "--report-dir", str(reports)])]
    code, err, took = stop_boot(argv, step, sig)
    assert code == 128 + sig, err
    assert f"lbconform: stopped by {sig.name}" in err, err
    assert_nothing_left(no_lab.dir, before)
    assert not reports.exists(), "the run's report folder was left"
    print(f"{command}: stopped {took:.1f}s after {sig.name} at {step}")
