"""The lab's kubelet API (lab-kubelet): how it is built, how the control plane and the node
are told about it, and the built server with the lab's own certificates and pod registry.

The streaming half (exec, attach, port-forward with client-go's SPDY clients) is covered by
the server's Go tests, run here inside the build module when the binary is built."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lbconform_lab import build, cluster, controlplane
from lbconform_lab import topology as topo
from lbconform_lab.agent import registry
from lbconform_lab.agent.node import NodeHeart
from lbconform_lab.pki import Identity, Pki
from lbconform_lab.state import LabDir

BUILT = build.LAB_KUBELET.is_built(build.cache_root())
needs_binary = pytest.mark.skipif(not BUILT, reason="lab-kubelet is not built: run 'lbconform lab build'")


def _own(source: Path) -> build.Artifact:
    return build.Artifact(key="own", module="m", version="v1", commands={"own": "m/cmd/own"},
                          source=source, build_in=build.KUBERNETES)


def test_a_changed_go_source_makes_the_own_binary_unbuilt(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "main.go").write_text("package main\n")
    (source / "main_test.go").write_text("package main\n")
    art = _own(source)
    bindir = art.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    (bindir / "own").write_text("")
    (bindir / ".complete").write_text(json.dumps({"source": art.source_digest()}))
    assert art.is_built(tmp_path)
    (source / "main_test.go").write_text("package main\n// a test changed\n")
    assert art.is_built(tmp_path), "a test is not part of the binary"
    (source / "main.go").write_text("package main\n// changed\n")
    assert not art.is_built(tmp_path)
    with pytest.raises(KeyError):
        build.binary("own", tmp_path)  # not one of the lab's artifacts


def test_the_kubelet_api_builds_inside_the_kubernetes_module() -> None:
    art = build.LAB_KUBELET
    assert art in build.ARTIFACTS
    assert build.ARTIFACTS.index(art) > build.ARTIFACTS.index(build.KUBERNETES)
    assert art.module_dir(Path("/c")) == build.KUBERNETES.module_dir(Path("/c"))
    assert art.commands["lab-kubelet"].startswith(build.module_path(build.KUBERNETES) + "/")
    assert art.source is not None and (art.source / "main.go").is_file()
    assert len(art.source_digest()) == 64


def test_the_apiserver_calls_kubelets_on_their_internal_ip_with_its_client_certificate() -> None:
    certs = controlplane.Certs(ca=Path("/p/ca.crt"), apiserver_crt=Path("a.crt"), apiserver_key=Path("a.key"),
                               sa_key=Path("sa.key"), sa_pub=Path("sa.pub"),
                               kubelet_client_crt=Path("/p/kc.crt"), kubelet_client_key=Path("/p/kc.key"))
    args = controlplane.apiserver_args(Path("kube-apiserver"), certs)
    for flag in ("--kubelet-client-certificate=/p/kc.crt", "--kubelet-client-key=/p/kc.key",
                 "--kubelet-certificate-authority=/p/ca.crt", "--kubelet-preferred-address-types=InternalIP"):
        assert flag in args


def test_the_node_tells_the_apiserver_its_kubelet_port() -> None:
    status: dict[str, Any] = {}

    class Recorder:
        def patch(self, path: str, body: dict[str, Any]) -> None:
            status.update(body["status"])

    NodeHeart(Recorder(), topo.Node(1)).post_status()  # type: ignore[arg-type]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert {"type": "InternalIP", "address": "198.19.0.11"} in status["addresses"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A lab-kubelet for node-1 on loopback, with the lab's PKI and an agent-written registry."""

    def __init__(self, lab: LabDir, pki: Pki, port: int) -> None:
        self.lab, self.pki, self.port = lab, pki, port

    def get(self, path: str, who: Identity | None = None) -> tuple[int, str]:
        """GET as the apiserver (or ``who``), checking the serving certificate against the node's
        IP, as the apiserver does, while connecting to loopback."""
        crt, key = self.lab.kubelet_client() if who is None else self.pki.client(who)
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
        ctx.load_cert_chain(str(crt), str(key))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=topo.Node(1).ip) as tls:
            request = f"GET {path} HTTP/1.1\r\nHost: {topo.Node(1).ip}\r\nConnection: close\r\n\r\n"
            tls.sendall(request.encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if b"chunked" in head.lower():
            body = _unchunk(body)
        return status, body.decode()


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, body = out + rest[:n], rest[n + 2:]
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    lab = LabDir(tmp_path / "lab")
    node = topo.Node(1)
    lab.node_dir(node.name).mkdir(parents=True)
    pki = Pki(lab.pki)
    cluster.kubelet_api_certs(pki, lab, [node])
    port, healthz = _free_port(), _free_port()
    argv = controlplane.lab_kubelet_args(build.binary("lab-kubelet"), node, lab,
                                         registry.pods_dir(lab.node_dir(node.name)),
                                         address="127.0.0.1", port=port, healthz_port=healthz)
    log = (tmp_path / "lab-kubelet.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=1) as resp:
                    assert resp.read() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None, (tmp_path / "lab-kubelet.log").read_text()
                assert time.monotonic() < deadline, "lab-kubelet never answered /healthz"
                time.sleep(0.05)
        yield Served(lab, pki, port)
    finally:
        proc.kill()
        proc.wait()
        log.close()


@needs_binary
def test_the_built_server_reads_the_registry_the_agent_writes(served: Served, tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text("one\ntwo\n")
    node_dir = served.lab.node_dir("node-1")
    registry.publish(node_dir, {"namespace": "ns", "name": "pod", "uid": "u1", "netns": None,
                                "ip": "198.19.0.11",
                                "containers": {"c": {"pid": None, "log": str(log), "previousLog": ""}}})
    assert served.get("/containerLogs/ns/pod/c") == (200, "one\ntwo\n")
    assert served.get("/containerLogs/ns/pod/c?tailLines=1") == (200, "two\n")
    status, body = served.get("/containerLogs/ns/other/c")
    assert status == 404 and 'pod "ns/other" does not exist' in body
    registry.withdraw(node_dir, "ns", "pod", "u1")
    assert served.get("/containerLogs/ns/pod/c")[0] == 404


@needs_binary
def test_the_built_server_serves_only_the_apiserver(served: Served) -> None:
    status, body = served.get("/healthz", Identity("admin", "lbconform-admin", ("system:masters",)))
    assert status == 403 and "kube-apiserver-kubelet-client" in body
    assert served.get("/healthz") == (200, "ok")


def _go_in_build_module(*args: str) -> subprocess.CompletedProcess[str]:
    """``go ARGS`` in the Kubernetes build module, with the lab-kubelet source staged there;
    -trimpath as the build, so the packages compiled for the lab's binaries are reused."""
    builder = build.Builder()
    builder.stage_source(build.LAB_KUBELET)
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod -buildvcs=false"}
    return subprocess.run(["go", args[0], "-trimpath", *args[1:], "./cmd/lab-kubelet"],
                          cwd=build.LAB_KUBELET.module_dir(builder.root), env=env,
                          capture_output=True, text=True, timeout=600, check=False)


needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain")


@needs_go
def test_the_servers_go_source_is_formatted() -> None:
    assert build.LAB_KUBELET.source is not None
    unformatted = subprocess.run(["gofmt", "-l", str(build.LAB_KUBELET.source)],
                                 capture_output=True, text=True, check=True).stdout
    assert unformatted == "", f"run gofmt -w on: {unformatted}"


@needs_binary
@needs_go
def test_the_servers_go_code_is_vetted_and_its_tests_pass() -> None:
    """go vet; then, as root, the Go tests: exec (stdin, stdout, stderr, exit code, terminal, the
    container's mounts), attach, logs -f and port-forward (into a network namespace) against
    client-go's SPDY clients."""
    vet = _go_in_build_module("vet")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    if os.geteuid() != 0:
        pytest.skip("the Go tests enter namespaces: they need root")
    proc = _go_in_build_module("test", "-count=1")
    out = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                    if not line.startswith(("20", "E1", "I1")))
    assert proc.returncode == 0, out[-4000:]
