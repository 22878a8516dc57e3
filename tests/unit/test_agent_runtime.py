"""The node agent's pure runtime parts with real local processes: the kubelet's kill
sequence, probe thresholds, image resolution. No namespaces, no cluster."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lbconform.errors import BuildError
from lbconform_lab import build
from lbconform_lab.agent import images
from lbconform_lab.agent.containers import Container
from lbconform_lab.agent.images import Program
from lbconform_lab.agent.probes import ProbeTarget, ProbeWorker, http_get

# Logs each signal with its time since start; ignores SIGTERM for `linger` seconds.
APP = """
import signal, sys, time
t0 = time.monotonic()
linger = float(sys.argv[1])
def term(*_):
    print(f"TERM {time.monotonic() - t0:.2f}", flush=True)
    time.sleep(linger)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("UP", flush=True)
while True:
    time.sleep(0.05)
"""


def _container(tmp_path: Path, linger: float, pre_stop: dict | None) -> tuple[Container, Path]:  # type: ignore[type-arg]
    script = tmp_path / "app.py"
    script.write_text(APP)
    spec = {"name": "app", "lifecycle": {"preStop": pre_stop} if pre_stop else {}}
    c = Container(spec, Program([sys.executable, str(script), str(linger)], "test"))
    log = tmp_path / "app.log"
    # Started as a container's setup starts its program: stdin closed first (the start waits for it).
    argv = ["sh", "-c", 'exec </dev/null; exec "$@"', "-", *(c.program.argv if c.program else [])]
    c.start(None, argv, {"PATH": "/usr/bin:/bin"}, log)
    deadline = time.monotonic() + 10
    while "UP" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    return c, log


def _target(c: Container) -> ProbeTarget:
    return ProbeTarget(lambda: "127.0.0.1", None, c.spec, lambda: {"PATH": "/usr/bin:/bin"})


@pytest.mark.skipif(sys.platform != "linux", reason="needs unshare")
def test_sigterm_after_pre_stop_then_sigkill_at_grace(tmp_path: Path) -> None:
    c, log = _container(tmp_path, linger=60, pre_stop={"sleep": {"seconds": 1}})
    t0 = time.monotonic()
    c.kill(3, _target(c))
    took = time.monotonic() - t0
    assert 2.8 <= took <= 3.8, took          # SIGKILL at the grace period, preStop included
    term_at = float(log.read_text().split("TERM ")[1].split()[0])
    assert term_at >= 1.0                     # SIGTERM only after the 1 s preStop
    assert c.exit_code == 137 and c.exit_reason == "Error"


def test_minimum_two_seconds_after_a_long_pre_stop(tmp_path: Path) -> None:
    c, _ = _container(tmp_path, linger=60, pre_stop={"sleep": {"seconds": 2}})
    t0 = time.monotonic()
    c.kill(2, _target(c))
    assert 3.8 <= time.monotonic() - t0 <= 4.8   # 2 s preStop + the kubelet's 2 s minimum


def test_shortened_grace_cuts_the_pre_stop_and_kills_by_the_new_deadline(tmp_path: Path) -> None:
    c, log = _container(tmp_path, linger=60, pre_stop={"sleep": {"seconds": 20}})
    t0 = time.monotonic()
    killer = threading.Thread(target=c.kill, args=(30, _target(c)))
    killer.start()
    time.sleep(1)
    c.shorten(1)                              # a later delete with a one-second grace period
    killer.join(10)
    took = time.monotonic() - t0
    assert not killer.is_alive()
    term_at = float(log.read_text().split("TERM ")[1].split()[0])
    assert 1.8 <= term_at <= 2.8, term_at     # the preStop ended when the shorter grace ran out
    assert 3.8 <= took <= 4.8, took           # SIGKILL the kubelet's 2 s minimum after SIGTERM
    assert c.exit_code == 137


def test_a_longer_grace_never_lengthens_a_kill(tmp_path: Path) -> None:
    c, _ = _container(tmp_path, linger=60, pre_stop=None)
    c.shorten(2)
    c.shorten(60)
    t0 = time.monotonic()
    c.kill(30, _target(c))
    assert 1.8 <= time.monotonic() - t0 <= 2.8


def test_prompt_exit_on_sigterm_is_not_killed(tmp_path: Path) -> None:
    c, _ = _container(tmp_path, linger=0, pre_stop=None)
    t0 = time.monotonic()
    c.kill(30, _target(c))
    assert time.monotonic() - t0 < 1.5
    assert c.exit_code == 0 and c.exit_reason == "Completed"


@pytest.fixture
def server() -> Iterator[tuple[int, list[int]]]:
    codes = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            codes.append(0)  # one entry per request after the first: the request count
            self.send_response(codes[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], codes
    srv.shutdown()


def test_http_probe_success_is_200_to_399(server: tuple[int, list[int]]) -> None:
    port, codes = server
    container = {"name": "c", "ports": [{"name": "http", "containerPort": port}]}
    for code, ok in ((200, True), (302, True), (503, False)):
        codes[0] = code
        assert http_get({"port": "http", "path": "/x"}, "127.0.0.1", container, 1)[0] is ok


def test_probe_thresholds() -> None:
    changes: list[bool | None] = []
    worker = ProbeWorker("readiness", {}, ProbeTarget(lambda: "", None, {"name": "c"}, dict),
                         lambda: True, lambda: changes.append(worker.result))
    assert worker.result is False
    for ok in (True, True, False, False, True, True):
        worker._record(ok, "", success_threshold=2, failure_threshold=2)
    assert changes == [True, False, True]


def test_images_resolve_to_local_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LBCONFORM_CACHE", str(tmp_path))
    bindir = build.KUBERNETES.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    for name in build.KUBERNETES.commands:
        (bindir / name).write_text("")
    (bindir / ".complete").write_text("{}")
    agnhost = str(bindir / "agnhost")
    ref = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
    assert images.resolve(ref, [], ["netexec"]).argv == [agnhost, "netexec"]
    assert images.resolve(ref, ["/agnhost", "pause"], []).argv == [agnhost, "pause"]
    assert images.resolve("registry.k8s.io/pause:3.10", [], []).argv == [agnhost, "pause"]
    with pytest.raises(images.UnknownImage, match=r"nginx.*registry\.k8s\.io/e2e-test-images/agnhost"):
        images.resolve("nginx:latest", [], [])


def test_the_python_image_runs_the_machines_interpreter_on_the_pods_program() -> None:
    python = os.path.realpath(sys.executable)
    program = ["/srv/quiet/quiet-server.py", "--http-port=8080"]
    for ref in ("python:3.13-alpine", "docker.io/library/python:3.13-alpine", "docker.io/python@sha256:00"):
        resolved = images.resolve(ref, ["python3", program[0]], program[1:])
        assert resolved.argv == [python, *program] and resolved.image_id == f"lab://python@{python}"
    assert images.resolve("python:3.13", [], program).argv == [python, *program]
    # A command that is not the interpreter runs as given; another repository named python is unknown.
    assert images.resolve("python:3.13", ["/bin/true"], []).argv == ["/bin/true"]
    with pytest.raises(images.UnknownImage, match=r"docker\.io/library/python"):
        images.resolve("example.com/python:3", [], [])



def test_metallb_images_run_the_built_binaries_whatever_the_tag(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LBCONFORM_CACHE", str(tmp_path))
    with pytest.raises(BuildError, match="--with metallb"):
        images.resolve("quay.io/metallb/speaker:v0.15.2", [], ["--port=7472"])
    bindir = build.METALLB.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    for name in [*build.METALLB.commands, *build.METALLB.files]:
        (bindir / name).write_text("")
    (bindir / ".complete").write_text("{}")
    speaker, controller = str(bindir / "metallb-speaker"), str(bindir / "metallb-controller")
    speaker_image, controller_image = "quay.io/metallb/speaker:v0.15.2", "quay.io/metallb/controller:main"
    assert images.resolve(speaker_image, [], ["--port=7472"]).argv == [speaker, "--port=7472"]
    assert images.resolve(controller_image, ["/controller", "-v"], []).argv == [controller, "-v"]
    program = images.resolve("quay.io/metallb/controller@sha256:00", [], [])
    assert program.argv == [controller] and program.image_id == f"lab://metallb-controller@{controller}"


def test_kube_vip_images_run_the_built_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-vip's DaemonSet passes args to the image's entrypoint; its cloud provider's Deployment
    names the binary as the command (the image's CMD)."""
    monkeypatch.setenv("LBCONFORM_CACHE", str(tmp_path))
    with pytest.raises(BuildError, match="--with kube-vip"):
        images.resolve("ghcr.io/kube-vip/kube-vip:v1.2.2", [], ["manager"])
    for art in build.OPTIONAL["kube-vip"]:
        bindir = art.bin_dir(tmp_path)
        bindir.mkdir(parents=True)
        for name in [*art.commands, *art.files]:
            (bindir / name).write_text("")
        (bindir / ".complete").write_text("{}")
    kube_vip = str(build.KUBE_VIP.bin_dir(tmp_path) / "kube-vip")
    provider = str(build.KUBE_VIP_CLOUD_PROVIDER.bin_dir(tmp_path) / "kube-vip-cloud-provider")
    assert images.resolve("ghcr.io/kube-vip/kube-vip:v1.2.2", [], ["manager"]).argv == [kube_vip, "manager"]
    command = ["/kube-vip-cloud-provider", "--leader-elect-resource-name=kube-vip-cloud-controller"]
    assert images.resolve("ghcr.io/kube-vip/kube-vip-cloud-provider:v0.0.12", command, []).argv == [
        provider, command[1]]

def test_exec_pre_stop_runs_before_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    c, log = _container(tmp_path, linger=0, pre_stop={
        "exec": {"command": ["sh", "-c", f"sleep 1; touch {marker}"]}})
    t0 = time.monotonic()
    c.kill(10, _target(c))
    assert marker.exists()
    term_at = float(log.read_text().split("TERM ")[1].split()[0])
    assert term_at >= 1.0 and time.monotonic() - t0 < 3


def test_http_pre_stop_is_sent_to_the_pod(tmp_path: Path, server: tuple[int, list[int]]) -> None:
    port, codes = server
    codes[0] = 200
    c, _ = _container(tmp_path, linger=0, pre_stop={"httpGet": {"path": "/stop", "port": port}})
    c.kill(10, _target(c))
    assert c.exit_code == 0
    assert len(codes) == 2, "the preStop GET did not arrive"


def test_a_refused_read_of_a_volume_source_is_retried_not_the_end_of_the_pod(tmp_path: Path) -> None:
    """A 403 (the node authorizer has not yet seen the pod that names the Secret), a 5xx or a broken
    connection while a pod's volumes are made is a FailedMount to retry, as for the kubelet; the
    pod worker lives on and mounts the volume once the read succeeds."""
    from types import SimpleNamespace

    import urllib3.exceptions

    from lbconform.kube.rawapi import ApiError
    from lbconform_lab.agent.objects import ObjectCache
    from lbconform_lab.agent.pods import PodWorker
    from lbconform_lab.topology import Node

    answers: list[object] = [ApiError(403, "Forbidden", 'secrets "memberlist" is forbidden: no relationship'),
                             urllib3.exceptions.ProtocolError("Connection aborted."),
                             {"data": {"secretkey": "c2VjcmV0"}}]

    class Api:
        def get(self, path: str) -> object:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    events: list[tuple[str, str]] = []
    agent = SimpleNamespace(
        labdir=SimpleNamespace(sandboxes_dir=lambda node: tmp_path / "sandboxes"), node=Node(1),
        nodedir=tmp_path, objects=ObjectCache(Api(), ttl=0.0), tokens=None, resources=None,
        event=lambda pod, reason, message, kind: events.append((reason, message)))
    pod = {"metadata": {"namespace": "metallb-system", "name": "speaker-x", "uid": "u1"},
           "spec": {"hostNetwork": True, "containers": [{"name": "speaker", "image": "nope"}],
                    "volumes": [{"name": "memberlist", "secret": {"secretName": "memberlist"}}]}}
    worker = PodWorker(agent, pod)  # type: ignore[arg-type]
    worker_ready = []
    for _ in range(3):  # a failed read is not cached: each try asks the API again
        worker_ready.append(worker._volumes())
    assert worker_ready == [False, False, True]
    assert [reason for reason, _ in events] == ["FailedMount", "FailedMount"]
    assert "forbidden" in events[0][1]
    assert (tmp_path / "volumes" / "u1" / "memberlist" / "secretkey").read_text() == "secret"
