"""The build module's pure parts: the go.mod it writes and the flags it passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lbconform.errors import BuildError, UsageError
from lbconform_lab import build

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
    with pytest.raises(UsageError, match="--with nope: the lab can also build metallb, kube-vip"):
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
