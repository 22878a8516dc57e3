"""The lab's OCI image layout tars: digests that match their blobs, the same bytes from the
same inputs, the names containerd imports them by, layers that keep modes and symlinks, host
programs that run from their unpacked layer, and one-line errors for what is wrong."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from lbconform.errors import LabError
from lbconform_lab import oci

REF = "registry.k8s.io/e2e-test-images/agnhost:2.53"
#: A dynamically linked Debian program that says it ran: coreutils' env (the machine's busybox is
#: the static build that the real nodes' images take, with nothing to bring).
DYNAMIC = ["/usr/bin/env", "LBCONFORM=ran"]


def _can_chroot() -> bool:
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        return False
    return subprocess.run(["chroot", "/", "true"], capture_output=True, check=False).returncode == 0


needs_chroot = pytest.mark.skipif(not _can_chroot(), reason="chroot needs root (CAP_SYS_CHROOT)")


def sample(tmp_path: Path, **changes: Any) -> oci.Image:
    script = tmp_path / "hello.sh"
    if not script.exists():
        script.write_text("#!/bin/sh\necho hello\n")
    fields: dict[str, Any] = {
        "reference": REF,
        "entries": [oci.File("/bin/hello", script, 0o750), oci.File("etc/motd", b"hi\n"),
                    oci.Symlink("/usr/bin/hello", "/bin/hello"), oci.Directory("/tmp", 0o1777)],
        "config": oci.Config(entrypoint=["/bin/hello"], cmd=["--x"], env=["PATH=/bin", "A=b"],
                             working_dir="/tmp", user="65534", exposed_ports=["8080", "53/udp"],
                             labels={"k": "v"}),
    }
    return oci.Image(**{**fields, **changes})


def members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def blob(layout: dict[str, bytes], digest: str) -> bytes:
    return layout[f"blobs/sha256/{digest.removeprefix('sha256:')}"]


def layer_of(layout: dict[str, bytes]) -> bytes:
    """The uncompressed layer tar of a one-manifest layout."""
    manifest = json.loads(blob(layout, json.loads(layout["index.json"])["manifests"][0]["digest"]))
    return gzip.decompress(blob(layout, manifest["layers"][0]["digest"]))


def unpack(image: oci.Image, tmp_path: Path) -> Path:
    oci.write_layout(image, tmp_path / "image.tar")
    root = tmp_path / "root"
    with tarfile.open(fileobj=io.BytesIO(layer_of(members(tmp_path / "image.tar")))) as tar:
        tar.extractall(root, filter="fully_trusted")
    return root


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def test_digests_in_index_manifest_and_config_match_the_blobs(tmp_path: Path) -> None:
    written = oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    layout = members(tmp_path / "image.tar")
    assert json.loads(layout["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in layout.items():
        if name.startswith("blobs/"):
            assert name == f"blobs/sha256/{hashlib.sha256(data).hexdigest()}"
    (entry,) = json.loads(layout["index.json"])["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert (entry["digest"], entry["size"]) == (written.manifest, len(blob(layout, written.manifest)))
    manifest = json.loads(blob(layout, written.manifest))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    for descriptor, digest in ((manifest["config"], written.config), (manifest["layers"][0], written.layer)):
        assert (descriptor["digest"], descriptor["size"]) == (digest, len(blob(layout, digest)))
    assert manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"


def test_the_diff_id_is_the_digest_of_the_uncompressed_layer(tmp_path: Path) -> None:
    written = oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    layout = members(tmp_path / "image.tar")
    config = json.loads(blob(layout, written.config))
    assert config["rootfs"] == {"type": "layers", "diff_ids": [sha(layer_of(layout))]}
    assert written.diff_id == sha(layer_of(layout)) != written.layer


def test_the_same_inputs_give_the_same_bytes_whatever_the_dates(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    image = sample(tmp_path)
    first = oci.write_layout(image, tmp_path / "one" / "image.tar")
    os.utime(tmp_path / "hello.sh", (1, 1))
    monkeypatch.setattr(time, "time", lambda: 2e9)  # a later build, as gzip and tarfile see it
    again = oci.write_layout(sample(tmp_path, entries=list(reversed(image.entries))),
                             tmp_path / "two" / "image.tar")
    assert (tmp_path / "one" / "image.tar").read_bytes() == (tmp_path / "two" / "image.tar").read_bytes()
    assert first == again
    (tmp_path / "hello.sh").write_text("#!/bin/sh\necho changed\n")
    assert oci.write_layout(image, tmp_path / "three.tar").layer != first.layer


def test_an_image_on_a_base_carries_the_bases_layer_byte_for_byte_then_its_own(tmp_path: Path) -> None:
    base = sample(tmp_path)
    top = oci.Image("locustio/locust:2.47.0", [oci.File("/etc/motd", b"changed\n"), oci.File("/app/x", b"x")],
                    oci.Config(cmd=["x"]), base=base)
    alone = oci.write_layout(base, tmp_path / "base.tar")
    written = oci.write_layout(top, tmp_path / "top.tar")
    layout = members(tmp_path / "top.tar")
    manifest = json.loads(blob(layout, written.manifest))
    assert [d["digest"] for d in manifest["layers"]] == list(written.layers) == [alone.layer, written.layer]
    assert blob(layout, alone.layer) == blob(members(tmp_path / "base.tar"), alone.layer)
    config = json.loads(blob(layout, written.config))
    assert config["rootfs"]["diff_ids"] == [alone.diff_id, written.diff_id]
    assert config["config"] == {"Cmd": ["x"], "Env": [oci.DEFAULT_PATH]}  # its own, not the base's
    root = tmp_path / "root"
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layout, layer["digest"])))) as tar:
            tar.extractall(root, filter="fully_trusted")
    assert (root / "etc/motd").read_bytes() == b"changed\n" and (root / "bin/hello").is_file()


def test_the_index_names_the_image_by_tag_and_by_full_reference(tmp_path: Path) -> None:
    oci.write_layout(sample(tmp_path), tmp_path / "agnhost.tar")
    oci.write_layout(sample(tmp_path, reference="python:3.12"), tmp_path / "python.tar")
    annotations = [json.loads(members(tmp_path / name)["index.json"])["manifests"][0]["annotations"]
                   for name in ("agnhost.tar", "python.tar")]
    tag, name = "org.opencontainers.image.ref.name", "io.containerd.image.name"
    assert annotations == [{tag: "2.53", name: REF}, {tag: "3.12", name: "docker.io/library/python:3.12"}]


def test_the_config_carries_the_platform_and_the_runtime_fields(tmp_path: Path) -> None:
    written = oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    config = json.loads(blob(members(tmp_path / "image.tar"), written.config))
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"] == {
        "Entrypoint": ["/bin/hello"], "Cmd": ["--x"], "Env": ["PATH=/bin", "A=b"], "WorkingDir": "/tmp",
        "User": "65534", "ExposedPorts": {"8080/tcp": {}, "53/udp": {}}, "Labels": {"k": "v"}}


def test_the_layer_keeps_modes_and_symlinks_adds_parents_and_names_no_owner(tmp_path: Path) -> None:
    oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    with tarfile.open(fileobj=io.BytesIO(layer_of(members(tmp_path / "image.tar")))) as tar:
        infos = tar.getmembers()
        assert tar.extractfile("bin/hello").read() == b"#!/bin/sh\necho hello\n"  # type: ignore[union-attr]
    by_name = {i.name: i for i in infos}
    assert [i.name for i in infos] == ["bin", "bin/hello", "etc", "etc/motd", "tmp", "usr", "usr/bin",
                                       "usr/bin/hello"]
    assert [by_name[n].mode for n in ("bin/hello", "etc/motd", "tmp")] == [0o750, 0o644, 0o1777]
    assert by_name["usr"].isdir() and by_name["usr"].mode == 0o755
    assert by_name["usr/bin/hello"].issym() and by_name["usr/bin/hello"].linkname == "/bin/hello"
    assert {(i.uid, i.gid, i.uname, i.gname, i.mtime) for i in infos} == {(0, 0, "", "", 0)}


def test_an_entry_given_twice_is_written_once(tmp_path: Path) -> None:
    image = sample(tmp_path)
    twice = sample(tmp_path, entries=[*image.entries, oci.File("/etc/./motd", b"hi\n")])
    assert oci.write_layout(twice, tmp_path / "twice.tar") == oci.write_layout(image, tmp_path / "once.tar")


def test_a_dynamic_program_brings_its_libraries_and_loader(tmp_path: Path) -> None:
    files = oci.program_files(Path(DYNAMIC[0]))
    paths = [f.path for f in files]
    assert paths[0] == DYNAMIC[0] and files[0].mode & 0o111
    assert any("/ld-linux" in p for p in paths), paths
    assert any("/libc.so" in p for p in paths), paths
    assert oci.program_files(Path(DYNAMIC[0]), "/app")[0] == oci.File("/app", Path(DYNAMIC[0]), files[0].mode)


@needs_chroot
def test_a_dynamic_program_runs_from_its_unpacked_layer_and_not_without_its_libraries(tmp_path: Path) -> None:
    program = Path(DYNAMIC[0])
    whole = unpack(oci.Image(REF, oci.program_files(program)), tmp_path / "whole")
    ran = subprocess.run(["chroot", str(whole), *DYNAMIC], capture_output=True, text=True, check=False)
    assert ran.returncode == 0 and "ran" in ran.stdout, ran.stderr
    alone = unpack(oci.Image(REF, [oci.File(str(program), program, 0o755)]), tmp_path / "alone")
    assert subprocess.run(["chroot", str(alone), *DYNAMIC], capture_output=True, check=False).returncode != 0


def test_a_static_program_comes_alone() -> None:
    ldconfig = Path("/usr/sbin/ldconfig")  # Debian's is static-pie
    if not ldconfig.is_file() or "statically linked" not in subprocess.run(
            ["ldd", str(ldconfig)], capture_output=True, text=True, check=False).stdout:
        pytest.skip("no static /usr/sbin/ldconfig on this machine")
    assert [f.path for f in oci.program_files(ldconfig)] == [str(ldconfig)]


@pytest.mark.parametrize(("change", "named"), [
    ({"entries": [oci.File("/bin/x", Path("/nonexistent/x"))]}, "/nonexistent/x"),
    ({"entries": [oci.File("/../etc/x", b"")]}, "'/../etc/x'"),
    ({"entries": [oci.Symlink("a/../../x", "y")]}, "'a/../../x'"),
    ({"entries": [oci.Directory("/")]}, "'/'"),
    ({"entries": [oci.File("/a", b"1"), oci.File("a", b"2")]}, "/a"),
    ({"entries": [oci.File("/a", b"1"), oci.File("/a/b", b"2")]}, "/a"),
    ({"reference": "Agnhost:2.53"}, "'Agnhost:2.53'"),
    ({"reference": "registry.k8s.io/agnhost"}, "'registry.k8s.io/agnhost'"),
    ({"reference": "agnhost:2.53@sha256:" + "0" * 64}, "agnhost:2.53@sha256"),
    ({"reference": "agnhost:bad tag"}, "'agnhost:bad tag'"),
    ({"config": oci.Config(env=["PATH"])}, "Env entry 'PATH'"),
    ({"config": oci.Config(exposed_ports=["http"])}, "ExposedPorts entry 'http'"),
])
def test_what_is_wrong_is_one_line_naming_it(tmp_path: Path, change: dict[str, Any], named: str) -> None:
    with pytest.raises(LabError) as error:
        oci.write_layout(sample(tmp_path, **change), tmp_path / "image.tar")
    assert named in str(error.value) and "\n" not in str(error.value)
    assert list(tmp_path.glob("*.tar")) == [] and list(tmp_path.glob(".image.tar.*")) == []


def test_a_missing_program_is_named() -> None:
    with pytest.raises(LabError, match="/nonexistent/prog"):
        oci.program_files(Path("/nonexistent/prog"))


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed (Debian: skopeo)")
def test_skopeo_reads_the_layout_by_tag_and_copies_it_checking_every_digest(tmp_path: Path) -> None:
    written = oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    source = f"oci-archive:{tmp_path / 'image.tar'}:2.53"
    inspected = subprocess.run(["skopeo", "inspect", source], capture_output=True, text=True, check=True)
    described = json.loads(inspected.stdout)
    assert (described["Digest"], described["Layers"]) == (written.manifest, [written.layer])
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", source, f"dir:{tmp_path / 'copy'}"],
                   capture_output=True, text=True, check=True)
    assert (tmp_path / "copy" / written.layer.removeprefix("sha256:")).is_file()


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci is not installed (Debian: umoci)")
def test_umoci_unpacks_the_layout_into_a_bundle(tmp_path: Path) -> None:
    oci.write_layout(sample(tmp_path), tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as tar:
        tar.extractall(tmp_path / "layout", filter="data")
    subprocess.run(["umoci", "unpack", "--image", f"{tmp_path / 'layout'}:2.53", str(tmp_path / "bundle")],
                   capture_output=True, text=True, check=True)
    rootfs = tmp_path / "bundle" / "rootfs"
    assert (rootfs / "etc" / "motd").read_bytes() == b"hi\n"
    assert os.readlink(rootfs / "usr" / "bin" / "hello") == "/bin/hello"
    assert (rootfs / "bin" / "hello").stat().st_mode & 0o7777 == 0o750
