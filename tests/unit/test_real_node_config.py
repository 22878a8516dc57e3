"""A real lab node's configuration and what it holds of the machine, without a cluster: the files
containerd and the kubelet read, the sysctl record shared by the labs, the cgroup hierarchies
found, and the images' contents and cache keys."""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lbconform.errors import LabError
from lbconform_lab import images, machine, nodeconfig, oci, realnode
from lbconform_lab import topology as topo


def node_paths(tmp_path: Path) -> nodeconfig.NodePaths:
    return nodeconfig.NodePaths(node=topo.Node(2), dir=tmp_path / "node-2", cgroup="/lbconform/lbc/node-2",
                                bin_dir=Path("/cache/bin/runc-v1"), cni_bin_dir=Path("/cache/bin/cni"))


def test_containerd_keeps_to_its_node_and_can_run_here(tmp_path: Path) -> None:
    p = node_paths(tmp_path)
    config = tomllib.loads(nodeconfig.containerd_toml(p))
    assert config["version"] == 3
    assert (config["root"], config["state"]) == (str(p.containerd_root), str(p.containerd_state))
    assert config["grpc"]["address"] == str(p.socket) and str(p.socket).startswith(str(p.dir))
    plugins = config["plugins"]
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == images.PAUSE
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True and runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cni"] == {"bin_dirs": [str(p.cni_bin_dir)], "conf_dir": str(p.cni_conf_dir),
                              "conf_template": str(p.cni_template)}
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/cache/bin/runc-v1/runc", "Root": str(p.runc_root), "SystemdCgroup": False,
                    "ShimCgroup": "/lbconform/lbc/node-2/shims"}
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_the_kubelet_serves_its_api_on_the_node_and_runs_here_without_privileges(tmp_path: Path) -> None:
    p = node_paths(tmp_path)
    serving = (Path("/pki/n.crt"), Path("/pki/n.key"))
    config = json.loads(nodeconfig.kubelet_yaml(p, Path("/pki/ca.crt"), serving))
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("198.19.0.12", 10250, 0)
    assert config["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert (config["cgroupDriver"], config["cgroupRoot"]) == ("cgroupfs", "/lbconform/lbc/node-2")
    assert config["failCgroupV1"] is False and config["oomScoreAdj"] == 0
    assert config["containerRuntimeEndpoint"] == f"unix://{p.socket}"
    assert config["nodeLeaseDurationSeconds"] == nodeconfig.NODE_LEASE_SECONDS
    args = nodeconfig.kubelet_args(Path("/k/kubelet"), p, Path("/n/kubeconfig"))
    assert "--hostname-override=node-2" in args and "--node-ip=198.19.0.12" in args


def test_the_cni_template_asks_for_every_pod_cidr_without_masquerade(tmp_path: Path) -> None:
    text = nodeconfig.cni_template(node_paths(tmp_path))
    # containerd renders the Go template; one range rendered by hand must be JSON.
    one = text.replace('{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}',
                       '[{"subnet": "100.64.2.0/24"}]')
    config = json.loads(one)
    ptp = config["plugins"][0]
    assert ptp["type"] == "ptp" and ptp["ipMasq"] is False
    assert ptp["ipam"]["ranges"] == [[{"subnet": "100.64.2.0/24"}]]


def test_the_sysctls_are_the_machines_again_when_the_last_lab_lets_go(tmp_path: Path) -> None:
    root, record = tmp_path / "sys", tmp_path / "labs" / "machine.json"
    (root / "vm").mkdir(parents=True)
    (root / "vm" / "overcommit_memory").write_text("0\n")
    made = tmp_path / "run-containerd"
    machine.hold("lab", {"vm/overcommit_memory": 1}, [made], record=record, root=root)
    machine.hold("lab2", {"vm/overcommit_memory": 1}, [made], record=record, root=root)
    assert (root / "vm" / "overcommit_memory").read_text() == "1\n" and made.is_dir()
    machine.release("lab", record=record, root=root)
    assert (root / "vm" / "overcommit_memory").read_text() == "1\n", "lab2 still holds it"
    machine.release("lab2", record=record, root=root)
    assert (root / "vm" / "overcommit_memory").read_text() == "0\n"
    assert not made.exists() and not record.exists()
    assert os.listdir(record.parent) == []


def test_cgroup_hierarchies_are_read_from_mountinfo() -> None:
    mountinfo = "\n".join([
        "30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755",
        "31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
        "33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
        "34 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
    ])
    assert machine.cgroup_v1_roots(mountinfo) == [Path("/sys/fs/cgroup/cpu,cpuacct"),
                                                  Path("/sys/fs/cgroup/memory")]
    assert machine.node_cgroup(topo.Node(3)) == f"/lbconform/{topo.PREFIX.rstrip('-')}/node-3"


@pytest.mark.skipif(not images.BUSYBOX.is_file(), reason="needs Debian's busybox-static")
def test_agnhosts_image_has_a_shell_and_upstreams_nc_and_curl() -> None:
    entries = {e.path: e for e in images.busybox_entries()}
    assert isinstance(entries["/bin/sh"], oci.Symlink) and entries["/bin/sh"].target == "/bin/busybox"
    tools = set(images.AGNHOST_TOOLS)
    kept = [e for e in images.busybox_entries() if e.path not in tools]
    assert "/usr/bin/nc" in entries and all(e.path != "/usr/bin/nc" for e in kept)


def test_an_image_is_written_again_only_when_what_makes_it_changes(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.write_text("one")

    def image(*extra: oci.Entry) -> oci.Image:
        return oci.Image("x/y:1", [oci.File("/prog", program, 0o755), *extra])

    first = images.image_key(image())
    assert images.image_key(image()) == first
    assert images.image_key(image(oci.Symlink("/bin/sh", "/prog"))) != first
    on_base = images.image_key(oci.Image("x/z:1", [], base=image()))
    os.utime(program, ns=(1, 1))
    assert images.image_key(image()) != first
    assert images.image_key(oci.Image("x/z:1", [], base=image())) != on_base  # its base changed
    assert images.tar_name("registry.k8s.io/pause:3.10.1", "k") == "pause-3.10.1-k.tar"


def unpacked(image: oci.Image, tmp_path: Path) -> Path:
    """The image's layers, unpacked in order under ``tmp_path``."""
    tar_path = tmp_path / "image.tar"
    oci.write_layout(image, tar_path)
    with tarfile.open(tar_path) as layout:
        def blob(digest: str) -> bytes:
            member = layout.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

        index = layout.extractfile("index.json")
        assert index is not None
        manifest = json.loads(blob(json.loads(index.read())["manifests"][0]["digest"]))
        layers = [gzip.decompress(blob(layer["digest"])) for layer in manifest["layers"]]
    root = tmp_path / "root"
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            tar.extractall(root, filter="fully_trusted")
    return root


def in_chroot(root: Path, *argv: str, user: str = "") -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``root`` with the image's PATH (and as ``user``), nothing of the machine's."""
    spec = ["--userspec", user] if user else []
    return subprocess.run(["chroot", *spec, str(root), *argv], capture_output=True, text=True, check=False,
                          env={"PATH": oci.DEFAULT_PATH.removeprefix("PATH="), "LANG": "C.UTF-8"})


def test_a_trees_entries_keep_its_symlinks_and_leave_out_what_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "lib" / "__pycache__").mkdir(parents=True)
    (tmp_path / "lib" / "__pycache__" / "a.pyc").write_bytes(b"x")
    (tmp_path / "lib" / "a.py").write_text("a = 1\n")
    (tmp_path / "lib" / "b.py").symlink_to("/etc/elsewhere.py")
    lib = tmp_path / "lib"
    entries = {e.path: e for e in oci.tree_entries(lib, skip=["__pycache__"])}
    assert set(entries) == {str(lib), str(lib / "a.py"), str(lib / "b.py")}
    assert entries[str(lib / "b.py")] == oci.Symlink(str(lib / "b.py"), "/etc/elsewhere.py")


def test_the_libraries_of_several_objects_come_once_each() -> None:
    libraries = [f.path for f in oci.shared_libraries([Path("/usr/bin/env"), Path("/usr/bin/ls")])]
    assert len(libraries) == len(set(libraries)) and any("/libc.so" in p for p in libraries), libraries
    assert not any(p.endswith(":") for p in libraries)


needs_python_image = pytest.mark.skipif(
    bool(images.missing()) or os.geteuid() != 0 or shutil.which("chroot") is None,
    reason=f"needs root and the Debian packages {' '.join(images.DEBS)}")


@needs_python_image
def test_the_python_image_runs_the_standard_library_and_its_extension_modules(tmp_path: Path) -> None:
    image = images.python()
    assert image.reference == images.PYTHON and image.config.cmd == ["python3"]
    root = unpacked(image, tmp_path)
    ran = in_chroot(root, "python3", "-c", "import ssl, sqlite3, ctypes, lzma, zlib, json, http.server, "
                    "platform; print(platform.python_version())")
    assert ran.returncode == 0 and ran.stdout.startswith("3.11."), ran.stderr
    assert in_chroot(root, "sh", "-c", "echo $((1 + 1))").stdout == "2\n"


@needs_python_image
def test_the_locust_image_runs_locust_as_its_user(tmp_path: Path) -> None:
    image = images.locust()
    assert image.reference == f"locustio/locust:{importlib.metadata.version('locust')}"
    assert (image.config.entrypoint, image.config.user) == (["locust"], "locust")
    root = unpacked(image, tmp_path)
    ran = in_chroot(root, "locust", "--version", user="1000:1000")
    assert ran.returncode == 0 and importlib.metadata.version("locust") in ran.stdout, ran.stderr
    imported = in_chroot(root, "python3", "-c", "import gevent, zmq, locust.runners, msgpack, psutil")
    assert imported.returncode == 0, imported.stderr


def test_make_setup_installs_the_packages_the_images_take() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    listed = makefile.split("\nDEBS", 1)[1].split("\nSTAMP", 1)[0].replace("\\\n", " ").split()
    assert set(images.DEBS) <= set(listed), set(images.DEBS) - set(listed)


@needs_python_image
def test_the_kubectl_image_runs_kubectl_and_the_tools_scripts_use(tmp_path: Path) -> None:
    image = images.kubectl()
    assert image.config.entrypoint == ["/bin/kubectl"]
    root = unpacked(image, tmp_path)
    ran = in_chroot(root, "/bin/kubectl", "version", "--client", "-o", "json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["clientVersion"]["gitVersion"] == image.reference.rpartition(":")[2]
    script = "echo '{\"a\": [1, 2]}' | jq -c '.a' | sed 's/,/ /' | awk '{print $2}'"
    piped = in_chroot(root, "bash", "-c", script)
    assert piped.stdout == "2]\n", piped.stderr


def _fake_imports(monkeypatch: pytest.MonkeyPatch, commands: dict[str, str]) -> list[subprocess.Popen[str]]:
    """Image imports as shell commands by node socket (``$0`` the tar's name), outside any node."""
    started: list[subprocess.Popen[str]] = []
    popen = subprocess.Popen

    def spy(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(proc := popen(*args, **kwargs))
        return proc

    monkeypatch.setattr(realnode.build, "binary", lambda _name: Path("/bin/true"))
    monkeypatch.setattr(realnode, "enter_argv_plain", lambda _p, argv: argv)
    monkeypatch.setattr(realnode.images, "import_argv",
                        lambda _ctr, socket, tar: ["sh", "-c", commands[socket], tar.name])
    monkeypatch.setattr(realnode.subprocess, "Popen", spy)
    return started


def _node(name: str) -> Any:
    return SimpleNamespace(node=SimpleNamespace(name=name), socket=Path(name))


def test_images_go_into_every_node_in_order_the_nodes_side_by_side(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    # Each node's import of a tar waits (5 s at most, then fails) for the other node's to start.
    wait = f'echo "$N $0" >> {tmp_path}/log; touch {tmp_path}/$N.$0; i=0; ' \
           f'until [ -e {tmp_path}/$OTHER.$0 ]; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.05; done'
    _fake_imports(monkeypatch, {"node-1": f"N=node-1 OTHER=node-2; {wait}",
                                "node-2": f"N=node-2 OTHER=node-1; {wait}"})
    realnode.import_images([_node("node-1"), _node("node-2")], [Path("a.tar"), Path("b.tar")])
    lines = (tmp_path / "log").read_text().splitlines()
    for n in ("node-1", "node-2"):
        assert [line for line in lines if line.startswith(n)] == [f"{n} a.tar", f"{n} b.tar"]


def test_a_failed_import_names_its_node_and_ends_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    started = _fake_imports(monkeypatch, {"node-1": "sleep 0.1; echo no space left >&2; exit 3",
                                          "node-2": "exec sleep 60"})
    failed = r"^node-1: importing a\.tar into its containerd failed: no space left$"
    with pytest.raises(LabError, match=failed):
        realnode.import_images([_node("node-1"), _node("node-2")], [Path("a.tar"), Path("b.tar")])
    assert len(started) == 2 and all(p.returncode is not None for p in started)
    assert started[1].returncode == -9  # the other node's import, ended
