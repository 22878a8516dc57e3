"""The build module's pure parts: the go.mod it writes and the flags it passes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from lbconform.errors import BuildError, UsageError
from lbconform_lab import build, versions

UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
\tgithub.com/other/thing => github.com/fork/thing v1.0.0
)
"""


def test_staging_modules_map_to_their_v0_tag() -> None:
    assert build.staging_replacements(UPSTREAM, "v1.36.3") == {
        "k8s.io/api": "v0.36.3", "k8s.io/cri-streaming": "v0.36.3"}


def test_a_go_mod_without_staging_is_an_error() -> None:
    with pytest.raises(BuildError, match="no staging modules"):
        build.staging_replacements("module x\n", "v1.36.3")


def test_rendered_go_mod_requires_tools_and_replaces() -> None:
    text = build.render_gomod(build.KUBERNETES, UPSTREAM, {"k8s.io/api": "v0.36.3"})
    assert "go 1.26.0" in text
    assert "godebug default=go1.26" in text
    assert f"require k8s.io/kubernetes {build.KUBERNETES.version}" in text
    assert "tool k8s.io/kubernetes/cmd/kube-apiserver" in text
    assert "tool k8s.io/kubernetes/test/images/agnhost" in text
    assert "\tk8s.io/api => k8s.io/api v0.36.3" in text


@pytest.mark.parametrize(("pkg", "name"), [
    ("k8s.io/kubernetes/cmd/kubectl", "kubectl"),
    ("go.etcd.io/etcd/server/v3", "server"),
    ("example.com/v2", "example.com"),
])
def test_default_binary_names(pkg: str, name: str) -> None:
    assert build.go_default_binary_name(pkg) == name


def test_version_ldflags_cover_component_base_and_client_go() -> None:
    flags = build.version_ldflags("v1.36.3", "abc", "2026-07-22T18:07:38Z")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.36.3" in flags
        assert f"-X {pkg}.gitMinor=36" in flags


def test_is_built_needs_the_stamp_and_every_binary(tmp_path: Path) -> None:
    art = build.ETCD
    bindir = art.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    (bindir / "etcd").write_text("")
    assert not art.is_built(tmp_path)
    (bindir / ".complete").write_text("{}")
    assert art.is_built(tmp_path)


def test_missing_binary_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="lbconform lab build"):
        build.binary("kube-proxy", tmp_path)


def test_an_optional_binary_says_which_build_makes_it(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="lbconform lab build --with metallb"):
        build.binary("metallb-speaker", tmp_path)


def test_optional_artifacts_build_only_when_named() -> None:
    assert build.artifacts() == build.ARTIFACTS
    assert build.artifacts(["metallb"]) == (*build.ARTIFACTS, build.METALLB)
    assert build.artifacts(["kube-vip"]) == (*build.ARTIFACTS, build.KUBE_VIP, build.KUBE_VIP_CLOUD_PROVIDER)
    with pytest.raises(UsageError, match="--with nope: the lab can also build metallb, kube-vip, nodes"):
        build.artifacts(["nope"])


def test_kube_vip_and_its_cloud_provider_say_which_build_makes_them(tmp_path: Path) -> None:
    for name in ("kube-vip", "kube-vip-cloud-provider", build.KUBE_VIP_CLOUD_PROVIDER_MANIFEST):
        with pytest.raises(BuildError, match="lbconform lab build --with kube-vip"):
            build.file(name, tmp_path)


def test_kube_vip_is_stamped_with_its_version_as_upstream_stamps_it() -> None:
    """kube-vip names its own image from ``main.Version`` in the manifests it writes: unstamped,
    the image would be ``ghcr.io/kube-vip/kube-vip:`` with no tag."""
    assert build.stamp_ldflags(build.KUBE_VIP, "972e0fd6") == "-X main.Version=v1.2.2 -X main.Build=972e0fd6"
    assert build.stamp_ldflags(build.KUBE_VIP_CLOUD_PROVIDER, "c2f036f3") == (
        "-X k8s.io/component-base/version.gitVersion=v0.0.12")
    assert build.stamp_ldflags(build.METALLB, "abc") == ""


def test_metallb_builds_in_a_module_of_its_own_without_replaces() -> None:
    gomod = build.render_gomod(build.METALLB, "module go.universe.tf/metallb\n\ngo 1.24.0\n")
    assert gomod.splitlines()[0] == "module lbconform.local/build/metallb-v0.15.2"
    assert "go 1.24.0" in gomod and "require go.universe.tf/metallb v0.15.2" in gomod
    assert "tool go.universe.tf/metallb/controller" in gomod and "replace" not in gomod
    assert build.METALLB.module_dir(Path("/c")) != build.KUBERNETES.module_dir(Path("/c"))


def test_an_artifact_is_built_only_with_its_upstream_files(tmp_path: Path) -> None:
    art = build.METALLB
    bindir = art.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    for name in art.commands:
        (bindir / name).write_text("")
    (bindir / ".complete").write_text("{}")
    assert not art.is_built(tmp_path)
    with pytest.raises(BuildError, match="lbconform lab build --with metallb"):
        build.file(build.METALLB_MANIFEST, tmp_path)
    (bindir / build.METALLB_MANIFEST).write_text("kind: Namespace\n")
    assert art.is_built(tmp_path)
    assert build.file(build.METALLB_MANIFEST, tmp_path) == bindir / build.METALLB_MANIFEST


def test_node_pins_stay_on_the_lines_the_kubelet_runs_with() -> None:
    """Kubernetes 1.36 needs containerd 2.2 or later; runc 1.3 is containerd 2.2's; the proxy
    serves the CNI plugins up to v1.10.0 and of cri-tools v1.37.0."""
    assert versions.CONTAINERD_VERSION.startswith("v2.2.")
    assert versions.RUNC_VERSION.startswith("v1.3.")
    plugins = tuple(int(n) for n in versions.CNI_PLUGINS_VERSION.removeprefix("v").split("."))
    assert plugins <= (1, 10, 0)
    assert versions.CRICTL_VERSION == "v1.37.0"
    assert {"ptp", "bridge", "host-local", "loopback", "portmap"} <= set(build.CNI_PLUGINS.commands)


def test_nodes_build_only_when_named() -> None:
    nodes = (build.KUBELET, build.CONTAINERD, build.RUNC, build.CNI_PLUGINS, build.CRICTL)
    assert build.artifacts(["nodes"]) == (*build.ARTIFACTS, *nodes)
    assert not {a.key for a in nodes} & {a.key for a in build.artifacts(["metallb", "kube-vip"])}
    assert build.artifacts(["nodes", "metallb"]) == (*build.ARTIFACTS, build.METALLB, *nodes)


def test_the_kubelet_builds_in_the_kubernetes_module_at_its_pin() -> None:
    """The kubelet must link the very k8s.io modules the control plane links."""
    art = build.KUBELET
    assert art.build_in is build.KUBERNETES and art.source is None
    assert art.version == build.KUBERNETES.version == "v1.36.3"
    assert art.commands == {"kubelet": "k8s.io/kubernetes/cmd/kubelet"}
    assert art.module_dir(Path("/c")) == build.KUBERNETES.module_dir(Path("/c"))
    assert art.c_programs == {"pause": "build/pause/linux/pause.c"}
    assert "kubelet" not in build.KUBERNETES.commands


@pytest.mark.parametrize("name", ["kubelet", "pause", "containerd", "ctr", "containerd-shim-runc-v2",
                                  "runc", "ptp", "host-local", "crictl"])
def test_node_binaries_say_which_build_makes_them(tmp_path: Path, name: str) -> None:
    with pytest.raises(BuildError, match="lbconform lab build --with nodes"):
        build.binary(name, tmp_path)


def test_the_kubelet_is_built_only_with_pause(tmp_path: Path) -> None:
    art = build.KUBELET
    bindir = art.bin_dir(tmp_path)
    bindir.mkdir(parents=True)
    (bindir / "kubelet").write_text("")
    (bindir / ".complete").write_text("{}")
    assert not art.is_built(tmp_path)
    (bindir / "pause").write_text("")
    assert art.is_built(tmp_path)
    assert build.binary("pause", tmp_path) == bindir / "pause"


def test_only_runc_needs_cgo_and_each_gets_upstreams_tags() -> None:
    assert [a.key for a in build.artifacts(["nodes", "metallb", "kube-vip"]) if a.cgo] == ["runc-v1.3.7"]
    assert build.RUNC.tags == ("seccomp",)
    assert build.CONTAINERD.tags == ("no_btrfs", "no_devmapper", "no_zfs")
    assert build.KUBELET.tags == build.CNI_PLUGINS.tags == build.CRICTL.tags == ()


class FakeGo:
    """Stands in for ``Builder._go``: records each call and makes the binaries ``go build`` would."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], bool]] = []

    def __call__(self, go: str, args: list[str], cwd: Path, what: str, cgo: bool = False) -> str:
        self.calls.append((args, cgo))
        out = Path(args[args.index("-o") + 1])
        for pkg in args[args.index("-o") + 2:]:
            (out / build.go_default_binary_name(pkg)).write_text("")
        return ""


@pytest.mark.parametrize(("art", "cgo", "tags"), [
    (build.RUNC, True, "seccomp"),
    (build.CONTAINERD, False, "no_btrfs,no_devmapper,no_zfs"),
    (build.CRICTL, False, None),
])
def test_go_build_gets_the_artifacts_cgo_and_tags(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, art: build.Artifact, cgo: bool,
        tags: str | None) -> None:
    fake = FakeGo()
    builder = build.Builder(tmp_path, progress=lambda _: None)
    monkeypatch.setattr(builder, "_go", fake)
    builder._compile("go", art, "-s -w", {"version": art.version})
    [(args, used_cgo)] = fake.calls
    assert used_cgo is cgo
    assert (args[args.index("-tags") + 1] if "-tags" in args else None) == tags
    assert art.is_built(tmp_path)


def test_cgo_is_on_in_the_go_environment_only_when_asked(tmp_path: Path) -> None:
    builder = build.Builder(tmp_path)
    assert builder._env()["CGO_ENABLED"] == "0"
    assert builder._env(cgo=True)["CGO_ENABLED"] == "1"


def test_pause_is_compiled_static_from_the_kubernetes_download(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src" / "build/pause/linux/pause.c"
    source.parent.mkdir(parents=True)
    source.write_text("int main(void) { return 0; }\n")
    argvs: list[list[str]] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        argvs.append(argv)
        Path(argv[argv.index("-o") + 1]).write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    builder = build.Builder(tmp_path, progress=lambda _: None)
    monkeypatch.setattr(builder, "_go", FakeGo())
    monkeypatch.setattr(build.subprocess, "run", fake_run)
    builder._compile("go", build.KUBELET, "-s -w", {"version": "v1.36.3"}, tmp_path / "src")
    [argv] = argvs
    assert argv[0] == "gcc" and "-static" in argv and "-DVERSION=v1.36.3" in argv
    assert argv[-1] == str(source)
    assert build.KUBELET.is_built(tmp_path)


def test_a_c_program_missing_from_the_download_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = build.Builder(tmp_path, progress=lambda _: None)
    monkeypatch.setattr(builder, "_go", FakeGo())
    with pytest.raises(BuildError, match=r"has no build/pause/linux/pause\.c"):
        builder._compile("go", build.KUBELET, "-s -w", {}, tmp_path)


def test_node_components_are_stamped_as_upstream_stamps_them() -> None:
    pkg = "github.com/containerd/containerd/v2"
    assert build.stamp_ldflags(build.CONTAINERD, "abc").split(" -X ") == [
        f"-X {pkg}/version.Version=v2.2.9", f"{pkg}/version.Revision=abc", f"{pkg}/version.Package={pkg}"]
    assert build.stamp_ldflags(build.CRICTL, "") == "-X sigs.k8s.io/cri-tools/pkg/version.Version=1.37.0"
    assert build.stamp_ldflags(build.CNI_PLUGINS, "") == (
        "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v1.10.0")
    assert build.stamp_ldflags(build.RUNC, "abc") == "-X main.gitCommit=abc"


def test_a_missing_debian_package_fails_in_one_line_naming_the_install() -> None:
    installed = {"gcc", "libc6-dev"}
    with pytest.raises(BuildError) as err:
        build.check_debs(build.artifacts(["nodes"]), installed=installed.__contains__)
    message = str(err.value)
    assert "\n" not in message
    assert message.endswith("run 'apt-get install -y libseccomp-dev'")
    assert "runc-v1.3.7" in message and "kubelet" not in message


def test_each_missing_debian_package_is_named_once() -> None:
    with pytest.raises(BuildError, match=r"run 'apt-get install -y gcc libc6-dev libseccomp-dev'$"):
        build.check_debs([build.KUBELET, build.RUNC], installed=lambda _: False)


def test_artifacts_without_c_ask_for_no_debian_package() -> None:
    asked: list[str] = []

    def installed(package: str) -> bool:
        asked.append(package)
        return False

    build.check_debs((*build.artifacts(["metallb"]), build.CONTAINERD, build.CRICTL), installed=installed)
    assert asked == []
    build.check_debs(build.artifacts(["nodes"]), installed=lambda _: True)


@pytest.mark.parametrize(("status", "installed"), [
    ("install ok installed", True),
    ("deinstall ok config-files", False),
    ("install ok half-installed", False),
])
def test_a_debian_package_counts_only_when_installed(
        monkeypatch: pytest.MonkeyPatch, status: str, installed: bool) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda _: "/usr/bin/dpkg-query")
    monkeypatch.setattr(build.subprocess, "run",
                        lambda argv, **_: subprocess.CompletedProcess(argv, 0, status, ""))
    assert build.deb_installed("libseccomp-dev") is installed


def test_build_all_checks_debian_packages_before_building_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setattr(build, "find_go", lambda: ("go", (1, 26)))
    monkeypatch.setattr(build, "deb_installed", lambda d: d != "libseccomp-dev")
    builder = build.Builder(tmp_path, progress=lambda _: None)
    monkeypatch.setattr(builder, "_build", lambda go, art: built.append(art.key))
    with pytest.raises(BuildError, match="apt-get install -y libseccomp-dev"):
        builder.build_all(["nodes"])
    assert built == []
