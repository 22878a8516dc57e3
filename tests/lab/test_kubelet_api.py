"""The kubelet's API on lab nodes, as a person debugging a pod uses it: the built kubectl in the
root namespace, through the apiserver, to each node's lab-kubelet (logs, exec, port-forward)."""

from __future__ import annotations

import queue
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier, load_one
from lbconform.wait import poll_until
from lbconform_lab import build
from lbconform_lab.cluster import Lab

pytestmark = pytest.mark.lab

#: A pod of the agnhost image is running within this.
START_SECONDS = 30.0
#: kubectl's own budget per command (it reaches the apiserver on loopback).
KUBECTL_SECONDS = 30.0
#: `kubectl logs -f` shows the log so far within this of its start (the issue's bar).
FOLLOW_FIRST_LINES_SECONDS = 1.0
#: The talker writes a line every 0.2 s: a follower sees a new one within this.
FOLLOW_NEXT_LINE_SECONDS = 3.0

#: Two lines at once, then one every 0.2 s, numbered.
TALKER = 'echo line-1; echo line-2; i=3; while true; do echo "line-$i"; i=$((i + 1)); sleep 0.2; done'


def _kubectl(lab: Lab, *args: str) -> list[str]:
    return [str(build.binary("kubectl")), f"--kubeconfig={lab.dir.kubeconfig}", *args]


def kubectl(lab: Lab, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_kubectl(lab, *args), input=stdin, capture_output=True, text=True,
                          timeout=KUBECTL_SECONDS, check=False)


def running_pod(ns: Applier, command: str) -> str:
    """A pod of the agnhost image running ``sh -c command``, started; its name."""
    pod = ns.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "talker"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.63.0",
            "command": ["sh", "-c", command]}]},
    })
    name: str = pod["metadata"]["name"]

    def running() -> bool:
        status = ns.api.get(f"/api/v1/namespaces/{ns.namespace}/pods/{name}").get("status", {})
        return any("running" in (c.get("state") or {}) for c in status.get("containerStatuses") or [])

    poll_until(running, timeout=START_SECONDS, interval=0.1, description=f"pod {name} to run")
    return name


class Lines:
    """A process's stdout, line by line, each with the time it arrived."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put((time.monotonic(), line.rstrip("\n")))

    def next(self, timeout: float) -> tuple[float, str]:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout}s") from None


Follower = Callable[..., tuple[float, Lines]]


@pytest.fixture
def follower(lab: Lab) -> Iterator[Follower]:
    """``follower(*args)``: a long-running kubectl, its output as Lines; ended after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[float, Lines]:
        started = time.monotonic()
        proc = subprocess.Popen(_kubectl(lab, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        procs.append(proc)
        assert proc.stdout is not None
        return started, Lines(proc.stdout)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_kubectl_logs_shows_the_containers_output(lab: Lab, test_namespace: Applier) -> None:
    """`kubectl logs` prints what the container wrote; --tail limits it to the last lines."""
    name = running_pod(test_namespace, TALKER)
    ns = test_namespace.namespace or ""
    result = kubectl(lab, "logs", "-n", ns, name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("line-1\nline-2\n"), result.stdout
    tail = kubectl(lab, "logs", "-n", ns, name, "--tail=1")
    assert tail.returncode == 0, tail.stderr
    assert re.fullmatch(r"line-\d+\n", tail.stdout), tail.stdout


def test_kubectl_logs_follow_streams_lines_as_they_come(
        lab: Lab, test_namespace: Applier, follower: Follower) -> None:
    """`kubectl logs -f` shows the log so far within a second, then each new line as it is written."""
    name = running_pod(test_namespace, TALKER)
    started, lines = follower("logs", "-f", "-n", test_namespace.namespace or "", name)
    at, first = lines.next(timeout=FOLLOW_FIRST_LINES_SECONDS * 5)
    assert first == "line-1"
    assert at - started <= FOLLOW_FIRST_LINES_SECONDS, f"first line after {at - started:.2f}s"
    seen = [first]
    # The log so far arrives at once; a line arriving a second later was written after the
    # follow began, so the follow streams.
    while time.monotonic() - at < 1.0:
        seen.append(lines.next(timeout=FOLLOW_NEXT_LINE_SECONDS)[1])
    numbers = [int(line.removeprefix("line-")) for line in seen]
    assert numbers == list(range(1, len(numbers) + 1)), seen


def test_kubectl_exec_runs_in_the_container_with_stdin_stdout_and_exit_code(
        lab: Lab, test_namespace: Applier) -> None:
    """`kubectl exec` runs in the container's root (its /etc/hostname names the pod, its /sys shows
    the pod's own interfaces), passes piped stdin and stdout through, and exits with the command's
    code."""
    name = running_pod(test_namespace, "exec sleep 3600")
    ns = test_namespace.namespace or ""
    assert socket.gethostname() != name, "the machine's own hostname would pass the check below"
    hostname = kubectl(lab, "exec", "-n", ns, name, "--", "cat", "/etc/hostname")
    assert (hostname.returncode, hostname.stdout) == (0, f"{name}\n"), hostname.stderr
    interfaces = kubectl(lab, "exec", "-n", ns, name, "--", "ls", "/sys/class/net")
    assert interfaces.stdout.split() == ["eth0", "lo"], (interfaces.stdout, interfaces.stderr)
    piped = kubectl(lab, "exec", "-i", "-n", ns, name, "--", "sh", "-c", "cat; exit 3",
                    stdin="through stdin\n")
    assert piped.stdout == "through stdin\n", piped.stderr
    assert piped.returncode == 3, piped.stderr


def test_kubectl_port_forward_reaches_an_agnhost_pod(
        lab: Lab, test_namespace: Applier, follower: Follower) -> None:
    """`kubectl port-forward` carries connections from a local port to the pod's port."""
    test_namespace.create(load_one("backend-deployment", tweaks.replicas(1)))
    ns = test_namespace.namespace or ""
    objects.wait_for_deployment(test_namespace.api, ns, "backend")
    pod = objects.pods(test_namespace.api, ns, "app=backend")[0]["metadata"]["name"]
    _, lines = follower("port-forward", "-n", ns, f"pod/{pod}", ":8080")
    said = [lines.next(timeout=KUBECTL_SECONDS)[1]]
    while not (match := re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080", said[-1])):
        assert len(said) < 5, said
        said.append(lines.next(timeout=KUBECTL_SECONDS)[1])
    port = int(match.group(1))
    for _ in range(3):  # each connection is a stream of its own over the one forward
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /hostname HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200") and body.strip() == pod.encode(), reply
