"""The lab's own lifecycle: it boots, refuses bad input without leaving anything, and
``lab down`` removes everything it made, and nothing else, even after a crash."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lbconform.errors import LabError
from lbconform.kube import tweaks
from lbconform.kube.manifests import Applier, load
from lbconform.nsexec import NETNS_RUN_DIR
from lbconform.wait import poll_until
from lbconform_lab import machine, nodeconfig, procs, topology
from lbconform_lab import netns as ns
from lbconform_lab.cluster import Lab
from lbconform_lab.state import LabDir
from tests.lab.helpers import LabSession

pytestmark = [pytest.mark.lab, pytest.mark.lab_lifecycle]


def root_namespace_snapshot() -> dict[str, str]:
    """What the lab must never change in the root namespace."""
    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    lab_dir = str(LabDir().root)
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith((lab_dir, "/run/containerd"))]
    return {
        # What real nodes hold of the machine (lbconform_lab.machine, realnode).
        "sysctls": json.dumps({k: Path("/proc/sys", k).read_text() for k in nodeconfig.KUBELET_SYSCTLS}),
        "cgroups": json.dumps(sorted(str(p) for p in Path("/sys/fs/cgroup").glob(
            f"*/{machine.CGROUP_TOP}/{topology.PREFIX.rstrip('-')}"))),
        "mounts": json.dumps(mounts),
        "/run/containerd": str(Path("/run/containerd").exists()),
        "links": out("ip", "-o", "link", "show"),
        "addresses": out("ip", "-o", "addr", "show"),
        "routes": out("ip", "-o", "route", "show", "table", "all"),
        "rules": out("ip", "rule", "show"),
        "nftables": out("nft", "list", "ruleset"),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
    }


def lab_namespaces() -> set[str]:
    return {n for n in ns.list_netns() if n.startswith(topology.PREFIX)}


def processes_of(labdir: LabDir) -> list[str]:
    """Processes still running any lab binary or the lab's agents, but another lab's: those run
    in namespaces the machine still names that are not this lab's (a process this lab left runs
    in the root namespace or in one of its own, deleted or not), or name another lab's directory
    and not this one's (a client of another lab, such as its tests' ``kubectl logs -f``)."""
    markers = ("lbconform_lab.agent", "lbconform_lab.forward", "/bin/kubernetes-v", "/bin/etcd-v",
               "/bin/lab-kubelet-v", "/bin/metallb-v", "/bin/kubelet-v", "/bin/containerd-v")
    # Other labs make and delete namespaces meanwhile: those named before or after the listing.
    others = _other_namespaces()
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True)
    others |= _other_namespaces()
    return [line for line in out.stdout.splitlines() if any(m in line for m in markers)
            and _netns_inode(int(line.split()[0])) not in (others | {None})
            and not _names_another_lab(line, labdir)]


def _other_namespaces() -> set[int]:
    """The inodes of the named network namespaces that are not this lab's, but one deleted
    between its listing and its look."""
    inodes = set()
    for name in ns.list_netns():
        if not name.startswith(topology.PREFIX):
            with contextlib.suppress(FileNotFoundError):
                inodes.add(os.stat(Path(NETNS_RUN_DIR) / name).st_ino)
    return inodes


def _names_another_lab(args: str, labdir: LabDir) -> bool:
    named = {m.group(0) for m in topology.LAB_DIR_PATTERN.finditer(args)}
    return bool(named) and str(labdir.root) not in named


def _netns_inode(pid: int) -> int | None:
    """The inode of the process's network namespace; None once it has ended."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def assert_nothing_left(labdir: LabDir, before: dict[str, str]) -> None:
    assert lab_namespaces() == set()
    assert processes_of(labdir) == []
    assert not labdir.root.exists()
    assert root_namespace_snapshot() == before


def cli(
    *args: str, env: dict[str, str] | None = None, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "lbconform.cli", *args]
    if user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lbconform: error: ")
    return lines[0]


def test_down_removes_everything_after_a_crash_mid_test(no_lab: Lab) -> None:
    before = root_namespace_snapshot()
    no_lab.up()
    during = root_namespace_snapshot()
    assert during == before, "lab up changed the root namespace"
    api = no_lab.api()
    ns_obj = Applier(api, None).create({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": "crash"}})
    Applier(api, ns_obj["metadata"]["name"]).create_all(
        load("backend-deployment", tweaks.pre_stop_sleep(30), tweaks.grace_period(60)))
    poll_until(lambda: len(list(no_lab.dir.root.glob("nodes/*/sandboxes/*"))) == 3,
               timeout=60, description="three pod sandboxes")
    # A test fails half-way: pods are terminating (long preStop) and an agent has crashed.
    for pod in api.get("/api/v1/namespaces/crash/pods")["items"]:
        api.delete(f"/api/v1/namespaces/crash/pods/{pod['metadata']['name']}")
    state = no_lab.dir.read()
    procs.signal_process(state.processes["agent-node-2"], signal.SIGKILL)
    assert no_lab.down() is True
    assert_nothing_left(no_lab.dir, before)
    assert no_lab.down() is False, "a second down must be a no-op"


def test_failed_boot_tears_down_and_names_the_component(no_lab: Lab) -> None:
    before = root_namespace_snapshot()

    def kill_etcd_when_started() -> None:
        def etcd() -> procs.Process | None:
            try:
                return no_lab.dir.read().processes.get("etcd")
            except LabError:
                return None

        victim = poll_until(etcd, timeout=60, interval=0.01, description="etcd to start")
        procs.signal_process(victim, signal.SIGKILL)

    killer = threading.Thread(target=kill_etcd_when_started, daemon=True)
    killer.start()
    with pytest.raises(LabError, match="etcd") as failure:
        no_lab.up()
    killer.join()
    assert "log" in str(failure.value)
    assert_nothing_left(no_lab.dir, before)


def test_second_up_refuses_and_keeps_the_running_lab(no_lab: Lab) -> None:
    no_lab.up(node_count=1)
    error = one_line_error(cli("lab", "up"))
    assert "already running" in error and "lab down" in error
    assert no_lab.status().processes and all(no_lab.status().processes.values())
    error = one_line_error(cli("lab", "node", "kill", "node-9"))
    assert "no lab node named 'node-9'" in error and "node-1" in error


def test_a_lab_whose_processes_all_died_is_named_and_replaced(no_lab: Lab) -> None:
    """What a killed run or a restarted machine leaves: namespaces and state, nothing running."""
    before = root_namespace_snapshot()
    no_lab.up(node_count=1)
    recorded = list(no_lab.dir.read().processes.values())
    procs.signal_process(recorded[0], signal.SIGKILL)
    assert not no_lab.leftover(), "a lab with processes left is someone's lab"
    for proc in recorded:
        procs.signal_process(proc, signal.SIGKILL)
    poll_until(no_lab.leftover, timeout=10, description="every recorded process to be gone")
    assert lab_namespaces(), "the leftover keeps its namespaces"

    error = one_line_error(cli("lab", "up"))
    assert "left by an earlier run" in error and "lab down" in error
    status = cli("lab", "status")
    assert status.returncode == 1 and "leftover" in status.stdout

    # A test session (and `lbconform run`) removes it and boots its own.
    session = LabSession()
    assert not session.user_lab
    assert_nothing_left(no_lab.dir, before)


def test_bad_input_gets_one_line_and_leaves_nothing(no_lab: Lab, tmp_path: Path) -> None:
    before = root_namespace_snapshot()

    error = one_line_error(cli("lab", "up", user="65534"))
    assert "needs root" in error

    no_go = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin", LBCONFORM_CACHE=str(tmp_path))
    error = one_line_error(cli("lab", "up", env=no_go))
    assert "no 'go' on PATH" in error and "install Go" in error

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        error = one_line_error(cli("lab", "up", "--api-port", str(port)))
        assert f"port 127.0.0.1:{port} is taken" in error

    ns.add_netns(topology.CLIENT_NS)
    try:
        error = one_line_error(cli("lab", "up"))
        assert topology.CLIENT_NS in error
        assert lab_namespaces() == {topology.CLIENT_NS}, "the lab touched a namespace it did not make"
    finally:
        ns.del_netns(topology.CLIENT_NS)

    error = one_line_error(cli("lab", "up", "--nodes", "0"))
    assert "--nodes" in error
    error = one_line_error(cli("lab", "node", "start", "node-1"))
    assert "no lab is running" in error
    assert_nothing_left(no_lab.dir, before)


def test_a_second_lab_instance_is_a_lab_of_its_own(no_lab: Lab) -> None:
    """Two labs side by side: the second (``LBCONFORM_LAB_INSTANCE=2``) has its own namespaces,
    directory and apiserver port, serves beside the first, and its ``lab down`` removes what it
    made and nothing of the first's; a bad instance is one line and makes nothing."""
    before = root_namespace_snapshot()
    no_lab.up(node_count=1)
    first = lab_namespaces()
    second_env = dict(os.environ, **{topology.INSTANCE_ENV: "2"})
    second_env.pop("LBCONFORM_LAB_DIR", None)
    try:
        up = cli("lab", "up", "--nodes", "1", env=second_env)
        assert up.returncode == 0, up.stderr
        second = ns.list_netns() - first
        assert second and all(n.startswith("lbc2-") for n in second), second
        assert lab_namespaces() == first, "the second lab touched the first's namespaces"
        status = cli("lab", "status", env=second_env)
        assert status.returncode == 0, status.stdout
        assert f"{topology.lab_dir(2)}," in status.stdout and "127.0.0.1:16444" in status.stdout
        kubectl = cli("lab", "kubectl", "get", "nodes", "-o", "name", env=second_env)
        assert kubectl.returncode == 0 and kubectl.stdout.split() == ["node/node-1"], kubectl
    finally:
        down = cli("lab", "down", env=second_env)
    assert down.returncode == 0, down.stderr
    assert ns.list_netns() == first, "the second lab's down left its namespaces or took the first's"
    assert not Path(topology.lab_dir(2)).exists()
    assert no_lab.status().processes and all(no_lab.status().processes.values()), "the first lab was hurt"
    assert no_lab.status().api_error == ""

    error = one_line_error(cli("lab", "status", env=dict(os.environ, **{topology.INSTANCE_ENV: "x"})))
    assert f"{topology.INSTANCE_ENV}='x' names no lab" in error
    no_lab.down()
    assert_nothing_left(no_lab.dir, before)
