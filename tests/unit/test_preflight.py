"""The run's preflight without a cluster: bad input is one line and exit 2, before anything is made.

The checks that need a cluster (nodes Ready, the identity's access) run against the lab in
tests/lab/test_preflight.py.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lbconform import preflight
from lbconform.errors import UsageError

CLOSED_PORT_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


#: A guard against a hung command, not a measure of speed: beside the lab tests on two cores a
#: command that exits in two seconds alone took up to a minute to start.
COMMAND_SECONDS = 300
#: Connections to a cluster that does not answer: the first, and the HTTP client's (urllib3's)
#: three retries.
ATTEMPTS = 4


def lbconform(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbconform.cli", *args], capture_output=True, text=True,
                          timeout=COMMAND_SECONDS, check=False, cwd=cwd)


def test_too_many_workers_for_the_machine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"-n 999: at most 8 test processes on this machine \(2 core"):
        preflight.check_local(tmp_path / "reports", 999, cores=2)
    assert not (tmp_path / "reports").exists()
    assert preflight.check_local(tmp_path / "reports", 8, cores=2) == [tmp_path / "reports"]


def test_an_unwritable_report_dir_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"--report-dir .*: cannot write there"):
        preflight.check_local(blocker / "a" / "b", 2)
    with pytest.raises(UsageError, match="cannot write there"):
        preflight.check_local(Path("/proc/nope"), 2)
    assert list(tmp_path.iterdir()) == [blocker]


def test_undo_removes_only_the_empty_directories_the_check_made(tmp_path: Path) -> None:
    made = preflight.check_local(tmp_path / "a" / "b", 2)
    assert made == [tmp_path / "a" / "b", tmp_path / "a"]
    (tmp_path / "a" / "keep").write_text("")
    preflight.undo(made)
    assert not (tmp_path / "a" / "b").exists() and (tmp_path / "a" / "keep").exists()


@pytest.mark.parametrize(("content", "message"), [
    (CLOSED_PORT_KUBECONFIG, "the cluster at https://127.0.0.1:1 did not answer /version "
                             r"\(.*Connection refused\): check the kubeconfig's server address"),
    ("root:x:0:0:root:/root:/bin/bash\n" * 50, r"not a kubeconfig \(no list of clusters in it\)"),
    ("key: [unclosed\n", "cannot read it as YAML"),
])
def test_a_bad_kubeconfig_is_one_line_exit_2_and_no_report(tmp_path: Path, content: str,
                                                            message: str) -> None:
    (tmp_path / "kc").write_text(content)
    done = lbconform("run", "--provider", "generic", "--kubeconfig", "kc", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbconform: error: "), lines
    assert len(lines[0]) < 400
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "reports").exists()


def test_a_cluster_that_does_not_answer_is_asked_a_few_times_not_waited_for(tmp_path: Path) -> None:
    """A server that accepts and closes every connection: the run gives up after the client's own
    retries, in one line, instead of waiting for the cluster."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    port = server.getsockname()[1]
    (tmp_path / "kc").write_text(CLOSED_PORT_KUBECONFIG.replace("127.0.0.1:1", f"127.0.0.1:{port}"))
    try:
        done = lbconform("run", "--provider", "generic", "--kubeconfig", "kc", cwd=tmp_path)
    finally:
        server.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "did not answer /version" in lines[0], lines
    assert 1 <= len(accepted) <= ATTEMPTS


def test_a_context_the_kubeconfig_lacks_is_named(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text(CLOSED_PORT_KUBECONFIG)
    done = lbconform("run", "--provider", "generic", "--kubeconfig", "kc", "--context", "nope", cwd=tmp_path)
    assert done.returncode == 2 and "nope" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["-n", "999"], r"-n 999: at most \d+ test processes on this machine"),
    (["--report-dir", "/proc/nope"], "--report-dir /proc/nope: cannot write there"),
])
def test_bad_run_options_are_refused_before_the_cluster_is_asked(tmp_path: Path, args: list[str],
                                                                  message: str) -> None:
    (tmp_path / "kc").write_text(CLOSED_PORT_KUBECONFIG)
    done = lbconform("run", "--provider", "generic", "--kubeconfig", "kc", *args, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and re.search(message, lines[0]), lines
    assert "127.0.0.1:1" not in lines[0] and not (tmp_path / "reports").exists()
