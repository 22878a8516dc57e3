"""The node agent's pod filesystem and configuration, without a cluster: a real container root
(mount namespace, overlay, hidden paths, bound volumes), the atomic writer, env sources, the
downward API's resource values and the token refresh rule."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lbconform_lab.agent import envsources, rootfs, tokens
from lbconform_lab.agent.containers import Container
from lbconform_lab.agent.images import Program
from lbconform_lab.agent.objects import CONFIG_MAP, SECRET, Data, Missing, ObjectCache
from lbconform_lab.agent.tokens import Token, TokenManager
from lbconform_lab.agent.volumes import PodContext, PodVolumes, write_atomically

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a container root needs mount namespaces (root)")


def _run(tmp_path: Path, mounts: list[rootfs.Mount], script: str) -> subprocess.CompletedProcess[str]:
    argv = rootfs.container_argv(tmp_path / "scratch", "pod-a", "100.64.9.9", "/etc", tmp_path / "lab",
                                 mounts, ["sh", "-c", script])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


@root_only
def test_a_container_sees_its_volumes_and_leaves_the_machine_alone(tmp_path: Path) -> None:
    volume = tmp_path / "sa"
    volume.mkdir()
    (volume / "token").write_text("t0k3n")
    writable = tmp_path / "scratchpad"
    writable.mkdir()
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "kubeconfig").write_text("secret")
    mounts = [rootfs.Mount(volume, "/var/run/secrets/kubernetes.io/serviceaccount"),
              rootfs.Mount(writable, "/data", read_only=False)]
    result = _run(tmp_path, mounts, "; ".join([
        "cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo",
        "cat /etc/hostname", "grep pod-a /etc/hosts", "pwd",
        "echo changed > /etc/lbc-written-by-a-pod && echo etc-writable",
        "echo nope > /var/run/secrets/kubernetes.io/serviceaccount/x 2>/dev/null || echo volume-read-only",
        "echo kept > /data/out",
        f"ls {tmp_path}/lab 2>/dev/null | grep -q kubeconfig && echo LAB-VISIBLE || echo lab-hidden",
        "ls /run/netns 2>/dev/null | grep -q . && echo NETNS-VISIBLE || echo run-hidden",
        f"test -x {rootfs.program_paths()[1]}/bin/python3 && echo python-there",
    ]))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "t0k3n", "pod-a", "100.64.9.9\tpod-a", "/etc", "etc-writable", "volume-read-only",
        "lab-hidden", "run-hidden", "python-there"]
    assert not Path("/etc/lbc-written-by-a-pod").exists()
    assert (writable / "out").read_text() == "kept\n"
    assert list((tmp_path / "scratch").iterdir()) == []


@root_only
def test_a_container_sees_the_interfaces_of_its_own_network_namespace(tmp_path: Path) -> None:
    """/sys/class/net in the container is its network namespace's (a new one has only lo), not
    the machine's, which a bind of the machine's /sys would show."""
    assert set(os.listdir("/sys/class/net")) != {"lo"}, "the check below needs a machine interface"
    argv = rootfs.container_argv(tmp_path / "scratch", "pod-a", "100.64.9.9", "/", tmp_path / "lab", [],
                                 ["sh", "-c", "ls /sys/class/net; test -d /sys/fs/cgroup && echo cgroup"])
    result = subprocess.run(["unshare", "--net", "--", *argv], capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["lo", "cgroup"], result.stdout


@root_only
def test_a_mount_path_through_a_machine_symlink_stays_inside_the_container(tmp_path: Path) -> None:
    if not Path("/var/run").is_symlink():
        pytest.skip("this machine's /var/run is not a symlink")
    volume = tmp_path / "v"
    volume.mkdir()
    result = _run(tmp_path, [rootfs.Mount(volume, "/var/run/lbc-unit-test")], "ls -d /run/lbc-unit-test")
    assert result.returncode == 0, result.stderr
    assert not Path("/run/lbc-unit-test").exists()


def test_the_atomic_writer_swaps_all_files_at_once_and_only_on_change(tmp_path: Path) -> None:
    target = tmp_path / "cm"
    assert write_atomically(target, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    first = os.readlink(target / "..data")
    assert (target / "a").read_text() == "1" and (target / "dir" / "b").read_text() == "2"
    assert os.readlink(target / "a") == "..data/a" and (target / "dir" / "b").stat().st_mode & 0o777 == 0o600
    assert not write_atomically(target, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    assert write_atomically(target, {"a": (b"changed", 0o644)})
    assert os.readlink(target / "..data") != first and not (target / first).exists()
    assert (target / "a").read_text() == "changed" and not (target / "dir").exists()


class _Objects:
    """ConfigMaps and Secrets by name, as the agent's cache returns them."""

    def __init__(self, **objects: tuple[str, dict[str, bytes]]) -> None:
        self.objects = objects

    def get(self, kind: str, namespace: str, name: str, optional: bool = False) -> Data | None:
        found = self.objects.get(name)
        if found is None or found[0] != kind:
            if optional:
                return None
            raise Missing(f'{kind.lower()} "{name}" not found')
        return Data(kind, namespace, name, found[1])


POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x", "tier": "web"}},
    "spec": {"nodeName": "node-1", "containers": [
        {"name": "c", "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m"}}}]},
}
NODE = envsources.NodeResources(Decimal(2), Decimal(24 * 2**30))


def _env(spec: dict[str, Any], objects: _Objects) -> dict[str, str]:
    return envsources.container_env(POD, {"name": "c", **spec}, "100.64.0.5", "198.19.0.11",
                                    objects, NODE)  # type: ignore[arg-type]


def test_env_sources_in_the_kubelets_order() -> None:
    objects = _Objects(settings=(CONFIG_MAP, {"MODE": b"fast", "SHARED": b"from-cm", "bad-name!": b"x"}),
                       creds=(SECRET, {"PASSWORD": b"hunter2"}))
    env_from = [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"}]
    env = _env({"envFrom": env_from,
                "env": [{"name": "SHARED", "value": "from-env $(MODE) $$(MODE)"},
                        {"name": "KEY",
                         "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "PASSWORD"}}},
                        {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k",
                                                                        "optional": True}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                           "divisor": "1Mi"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]},
               objects)
    assert env["MODE"] == "fast" and env["S_PASSWORD"] == "hunter2" and "bad-name!" not in env
    assert env["SHARED"] == "from-env fast $(MODE)" and env["KEY"] == "fast" and env["PW"] == "hunter2"
    assert "GONE" not in env and env["MEM"] == "128" and env["CPU"] == "2" and env["IP"] == "100.64.0.5"
    assert env["KUBERNETES_SERVICE_HOST"] and env["KUBERNETES_SERVICE_PORT"] == "443"


@pytest.mark.parametrize(("var", "message"), [
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}},
     'configmap "absent" not found'),
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nokey"}}},
     "couldn't find key nokey in ConfigMap ns/settings"),
])
def test_a_missing_reference_is_a_config_error(var: dict[str, Any], message: str) -> None:
    with pytest.raises(envsources.ConfigError, match=message):
        _env({"env": [var]}, _Objects(settings=(CONFIG_MAP, {"MODE": b"fast"})))


def test_quantities_and_resource_values_round_up() -> None:
    assert envsources.quantity("250m") == Decimal("0.25") and envsources.quantity("1Gi") == 2**30
    assert envsources.quantity("1e3") == 1000
    ref = {"resource": "requests.cpu", "divisor": "1m"}
    assert envsources.resource_field_ref(POD, "c", ref, NODE) == "250"
    assert envsources.resource_field_ref(POD, "c", {"resource": "requests.cpu"}, NODE) == "1"
    assert envsources.resource_field_ref(POD, "c", {"resource": "limits.memory"}, NODE) == str(2**27)
    assert envsources.field_ref(POD, "metadata.labels", "", "") == 'app="x"\ntier="web"'
    with pytest.raises(envsources.ConfigError, match="not a Kubernetes quantity"):
        envsources.quantity("lots")


def test_a_token_is_refreshed_at_eighty_percent_of_its_requested_life() -> None:
    token = Token("t", expires=10_000.0, requested_seconds=3600)
    assert not token.due(token.issued + 0.79 * 3600)
    assert token.due(token.issued + 0.8 * 3600)
    extended = Token("t", expires=10_000.0 + 365 * 86400, requested_seconds=365 * 86400)
    assert extended.due(extended.issued + 86400) and not extended.due(extended.issued + 86399)


class _TokenIssuer:
    """Answers TokenRequests as the API server does, one new token per request, recording each."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.now = 1_800_000_000.0

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((path, body))
        expires = dt.datetime.fromtimestamp(self.now + body["spec"]["expirationSeconds"], dt.UTC)
        return {"status": {"token": f"token-{len(self.requests)}",
                           "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


def test_a_projected_token_is_rewritten_once_due_and_not_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The volume sync asks the token manager each time; only a due token means a new request."""
    issuer = _TokenIssuer()
    monkeypatch.setattr(tokens.time, "time", lambda: issuer.now)
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u-1"},
           "spec": {"serviceAccountName": "sa", "volumes": [{"name": "t", "projected": {"sources": [
               {"serviceAccountToken": {"path": "token", "audience": "a", "expirationSeconds": 600}}]}}]}}
    ctx = PodContext(pod, "100.64.0.9", "198.19.0.11", ObjectCache(issuer),  # type: ignore[arg-type]
                     TokenManager(issuer), envsources.NodeResources(Decimal(2), Decimal(2**30)))  # type: ignore[arg-type]
    volumes = PodVolumes(tmp_path, ctx)
    volumes.setup()
    token_file = tmp_path / "volumes" / "u-1" / "t" / "token"
    assert token_file.read_text() == "token-1"
    path, body = issuer.requests[0]
    assert path == "/api/v1/namespaces/n/serviceaccounts/sa/token"
    assert body["spec"]["audiences"] == ["a"] and body["spec"]["boundObjectRef"]["uid"] == "u-1"
    issuer.now += 0.79 * 600
    volumes.sync(pod)
    assert token_file.read_text() == "token-1" and len(issuer.requests) == 1
    issuer.now += 0.02 * 600
    volumes.sync(pod)
    assert token_file.read_text() == "token-2" and len(issuer.requests) == 2
    volumes.remove()
    assert not token_file.exists()


@root_only
def test_a_started_container_is_entered_in_its_own_root(tmp_path: Path) -> None:
    """Once a start returns, an exec into the container (``rootfs.exec_argv``) finds the pod's
    root, its /etc/hostname naming the pod: the setup mounts for tens of milliseconds first, and
    an exec entering before would read the machine's."""
    assert socket.gethostname() != "pod-a"
    (tmp_path / "lab").mkdir()
    c = Container({"name": "main"}, Program(["sleep", "30"], "test"))
    argv = rootfs.container_argv(tmp_path / "scratch", "pod-a", "100.64.9.9", "/", tmp_path / "lab", [],
                                 ["sleep", "30"])
    c.start(None, argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, tmp_path / "main.log")
    try:
        assert c.proc is not None
        seen = subprocess.run(rootfs.exec_argv(c.proc.pid, ["cat", "/etc/hostname"]), capture_output=True,
                              text=True, timeout=10, check=False)
        assert (seen.returncode, seen.stdout) == (0, "pod-a\n"), seen.stderr
    finally:
        assert c.proc is not None
        c.proc.kill()
        c.proc.wait()
