"""The container images a real lab node holds, built here and never pulled.

The lab has no registry, so every image a pod names must be in the node's containerd before the
kubelet asks for it (a tagged image is IfNotPresent: nothing is pulled). Each image here is made
from what the lab builds and from this machine's Debian packages, under the reference a cluster
would pull it by, and holds what upstream's image of that name holds for the lab's uses:

- ``registry.k8s.io/pause:3.10.1``: the sandbox's one process, the pause program the lab
  compiles from the Kubernetes module (containerd's pinned sandbox image).
- ``registry.k8s.io/e2e-test-images/agnhost:2.63.0``: the agnhost the lab builds from the same
  module, with a shell and the tools upstream's e2e execs in it: busybox (Debian's static build,
  all its applets, as upstream's Alpine base has), curl and OpenBSD's nc with their libraries.
- ``registry.k8s.io/kubectl:v1.36.3``: the lab's kubectl at /bin/kubectl, its entrypoint, with
  bash, jq and busybox's tools, as upstream's Debian-based image has them.
- ``docker.io/library/python:3.11-slim-bookworm`` (the quiet backend's): Debian bookworm's
  Python 3.11 and standard library, with the shared libraries of its extension modules, and
  busybox for the shell and tools of upstream's Debian base.
- ``locustio/locust:2.47.0`` (the chaos suites' workers): the python image's layer, and one of
  Locust with what it requires from the environment the lab runs in, its entrypoint ``locust``,
  run as the user locust.
- With ``--lb metallb``, ``quay.io/metallb/controller`` and ``speaker`` at the version the lab
  builds, and with ``--lb kube-vip``, ``ghcr.io/kube-vip/kube-vip`` and its cloud provider: each
  the one static program upstream's image (``FROM scratch`` or distroless) holds, at the path its
  entrypoint names, built from the project's own module.

Each image is one OCI layout tar (``oci.write_layout``) in the cache, named by a digest of what
makes it (its entries, with each file's source path, size and modification time), so a rebuilt
binary or a changed recipe makes a new image and an unchanged one is not written again. A node
imports them at boot (``import_argv``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lbconform.cache import cache_root
from lbconform.errors import LabError
from lbconform_lab import build, oci, versions

PAUSE: Final = "registry.k8s.io/pause:3.10.1"
AGNHOST: Final = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
#: Debian's static busybox (package busybox-static): the shell and small tools of images whose
#: upstream base is Alpine.
BUSYBOX: Final = Path("/bin/busybox")
KUBECTL: Final = f"registry.k8s.io/kubectl:{versions.KUBERNETES_VERSION}"
#: Programs of this machine that upstream's kubectl image installs beside kubectl, by their path in
#: the image (its Dockerfile adds bash and jq, with grep, sed, gawk, coreutils and diffutils).
KUBECTL_TOOLS: Final = {"/bin/bash": Path("/bin/bash"), "/usr/bin/jq": Path("/usr/bin/jq")}
PYTHON: Final = "docker.io/library/python:3.11-slim-bookworm"
#: Debian bookworm's Python 3.11 (packages python3.11-minimal and libpython3.11-stdlib): the
#: interpreter and standard library of the python image, which upstream builds from python.org's
#: sources on the same Debian release.
PYTHON_PROGRAM: Final = Path("/usr/bin/python3.11")
PYTHON_VERSION: Final = (3, 11)
PYTHON_STDLIB: Final = Path("/usr/lib/python3.11")
#: What the image leaves out of the standard library: this machine's compiled caches (made by
#: whatever ran here, so never the same twice) and the build's own configuration.
PYTHON_SKIP: Final = ("__pycache__", "config-3.11-x86_64-linux-gnu")
#: Where Debian's Python finds what pip installs (``/usr/local/lib/python3.11/dist-packages``).
SITE_PACKAGES: Final = Path("/usr/local/lib/python3.11/dist-packages")
#: Programs from this machine's packages that upstream's agnhost image carries, by their path
#: in the image: curl, and OpenBSD's nc (busybox's has no -z, -u or -v).
AGNHOST_TOOLS: Final = {"/usr/bin/curl": Path("/usr/bin/curl"), "/usr/bin/nc": Path("/bin/nc.openbsd")}
#: The Debian packages those come from (``make setup`` installs them).
DEBS: Final = ("busybox-static", "curl", "netcat-openbsd", "bash", "jq", "python3.11-minimal",
                "libpython3.11-stdlib")


def missing() -> list[str]:
    """The machine's files the images take that it lacks (from ``DEBS``)."""
    files = (BUSYBOX, *AGNHOST_TOOLS.values(), *KUBECTL_TOOLS.values(), PYTHON_PROGRAM,
             PYTHON_STDLIB / "os.py")
    return [str(p) for p in files if not p.is_file()]


def images_dir() -> Path:
    return cache_root() / "images"


def busybox_entries(busybox: Path = BUSYBOX) -> list[oci.Entry]:
    """busybox at /bin/busybox and a link for each applet it lists, where it lists it."""
    if not busybox.is_file():
        raise LabError(f"{busybox} is missing: install Debian's busybox-static (make setup does)")
    listed = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=True).stdout
    entries: list[oci.Entry] = [oci.File("/bin/busybox", busybox, 0o755)]
    for path in sorted({"/" + line.strip() for line in listed.splitlines() if line.strip()}):
        if path != "/bin/busybox":
            entries.append(oci.Symlink(path, "/bin/busybox"))
    return entries


def pause() -> oci.Image:
    return oci.Image(PAUSE, [oci.File("/pause", build.binary("pause"), 0o755)],
                     oci.Config(entrypoint=["/pause"]))


def agnhost() -> oci.Image:
    """agnhost, busybox's applets, and the tools in ``AGNHOST_TOOLS`` in place of busybox's own."""
    entries: list[oci.Entry] = [oci.File("/agnhost", build.binary("agnhost"), 0o755),
                                *(e for e in busybox_entries() if e.path not in AGNHOST_TOOLS)]
    for path, program in AGNHOST_TOOLS.items():
        files = oci.program_files(program, path)
        entries += [f for f in files if f.path not in {e.path for e in entries}]
    entries.append(oci.Directory("/tmp", 0o1777))
    return oci.Image(AGNHOST, entries, oci.Config(entrypoint=["/agnhost"]))


@functools.cache
def python() -> oci.Image:
    """Debian's Python 3.11 where the python image's is, ``python3`` and ``python`` on its PATH,
    the standard library with every extension module's shared libraries, and busybox's shell and
    tools (upstream's image is a Debian with its shell and coreutils)."""
    stdlib = oci.tree_entries(PYTHON_STDLIB, skip=PYTHON_SKIP)
    extensions = sorted(Path(e.path) for e in stdlib if isinstance(e, oci.File) and e.path.endswith(".so"))
    entries: list[oci.Entry] = [*busybox_entries(), *stdlib,
                                *oci.shared_libraries([PYTHON_PROGRAM, *extensions]),
                                oci.File(str(PYTHON_PROGRAM), PYTHON_PROGRAM, 0o755),
                                oci.Directory("/tmp", 0o1777)]
    links = {"/usr/bin/python3": "python3.11", "/usr/local/bin/python3": str(PYTHON_PROGRAM),
             "/usr/local/bin/python": str(PYTHON_PROGRAM)}
    # Debian's standard library names its site customisation in /etc: the image carries it.
    entries += [oci.File(e.target, Path(e.target)) for e in stdlib
                if isinstance(e, oci.Symlink) and e.target.startswith("/etc/") and Path(e.target).is_file()]
    taken = {e.path for e in entries}
    entries += [oci.Symlink(path, target) for path, target in links.items() if path not in taken]
    version = subprocess.run([str(PYTHON_PROGRAM), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return oci.Image(PYTHON, entries, oci.Config(cmd=["python3"], env=(
        oci.DEFAULT_PATH, "LANG=C.UTF-8", f"PYTHON_VERSION={version}")))


def distributions(name: str) -> list[metadata.Distribution]:
    """``name``'s distribution and those it requires on this machine, without extras, sorted."""
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonicalize_name(todo.pop())
        if key in found:
            continue
        try:
            found[key] = dist = metadata.distribution(key)
        except metadata.PackageNotFoundError as exc:
            raise LabError(f"the lab's images: {key}, which {name} requires, is not installed: "
                           "run 'make setup'") from exc
        for requirement in map(Requirement, dist.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[k] for k in sorted(found)]


#: The users of the Locust image: root, and locust (uid 1000) who runs it.
PASSWD: Final = b"root:x:0:0:root:/root:/bin/sh\nlocust:x:1000:1000::/home/locust:/bin/sh\n"
GROUP: Final = b"root:x:0:\nlocust:x:1000:\n"


def locust() -> oci.Image:
    """A layer on the python image's (a node stores and unpacks that once for both): Locust and
    what it requires, from the environment the lab runs in, where Debian's Python looks for what
    pip installs; ``locust`` its entrypoint, run as the user locust in its home, as upstream's
    image does."""
    if sys.version_info[:2] != PYTHON_VERSION:
        raise LabError(f"the Locust image runs Debian's Python {'.'.join(map(str, PYTHON_VERSION))} with "
                       f"the packages of the lab's environment, which is Python {sys.version.split()[0]}: "
                       f"make the virtualenv with python{'.'.join(map(str, PYTHON_VERSION))} (make setup "
                       "PYTHON=python3.11)")
    base = python()
    packages: list[oci.Entry] = []
    roots = set()
    for dist in distributions("locust"):
        roots.add(root := Path(str(dist.locate_file(""))).resolve())
        for listed in dist.files or []:
            source = Path(str(dist.locate_file(listed))).resolve()
            if source.is_relative_to(root) and source.is_file() and "__pycache__" not in source.parts:
                packages.append(oci.File(str(SITE_PACKAGES / source.relative_to(root)), source,
                                         stat.S_IMODE(source.stat().st_mode)))
    objects = [Path(str(e.source)) for e in packages
               if isinstance(e, oci.File) and ".so" in Path(e.path).suffixes]
    taken = {e.path for e in (*base.entries, *packages)}
    # A wheel's own libraries (``pyzmq.libs``) are among its files, and found by the runpath.
    libraries = [f for f in oci.shared_libraries(objects) if f.path not in taken
                 and not any(Path(os.path.normpath(f.path)).is_relative_to(r) for r in roots)]
    (script,) = [e for e in metadata.distribution("locust").entry_points
                 if e.group == "console_scripts" and e.name == "locust"]
    module, _, function = script.value.partition(":")
    program = f"#!{PYTHON_PROGRAM}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    entries = [*packages, *libraries,
               oci.File("/usr/local/bin/locust", program.encode(), 0o755),
               oci.File("/etc/passwd", PASSWD), oci.File("/etc/group", GROUP),
               oci.Directory("/home/locust", 0o755)]
    return oci.Image(f"locustio/locust:{metadata.version('locust')}", entries, oci.Config(
        entrypoint=["locust"], env=base.config.env, user="locust", working_dir="/home/locust",
        exposed_ports=["8089", "5557"]), base=base)


def kubectl() -> oci.Image:
    """The kubectl the lab builds at /bin/kubectl, its entrypoint, with the tools upstream's image
    adds to its Debian base for scripts: bash and jq from this machine, busybox for grep, sed, awk,
    coreutils and diff."""
    tools = [f for path, program in KUBECTL_TOOLS.items() for f in oci.program_files(program, path)]
    own = {f.path for f in tools}
    entries: list[oci.Entry] = [*(e for e in busybox_entries() if e.path not in own),
                                *{f.path: f for f in tools}.values(),
                                oci.File("/bin/kubectl", build.binary("kubectl"), 0o755),
                                oci.Directory("/tmp", 0o1777)]
    return oci.Image(KUBECTL, entries, oci.Config(entrypoint=["/bin/kubectl"]))


def entrypoint_image(reference: str, path: str, binary: str) -> Callable[[], oci.Image]:
    """An image of one built program at ``path``, its entrypoint."""
    def make() -> oci.Image:
        return oci.Image(reference, [oci.File(path, build.binary(binary), 0o755)],
                         oci.Config(entrypoint=[path]))
    return make


#: Every image a real node holds, made from this machine's files at each call (the python image
#: once per process: the Locust image stands on it).
RECIPES: Final[tuple[Callable[[], oci.Image], ...]] = (pause, agnhost, kubectl, python, locust)
#: The images of the load balancers the lab runs from upstream's manifests, by ``lab up --lb``.
LB_RECIPES: Final[dict[str, tuple[Callable[[], oci.Image], ...]]] = {
    "metallb": (
        entrypoint_image(f"quay.io/metallb/controller:{versions.METALLB_VERSION}", "/controller",
                         "metallb-controller"),
        entrypoint_image(f"quay.io/metallb/speaker:{versions.METALLB_VERSION}", "/speaker",
                         "metallb-speaker")),
    "kube-vip": (
        entrypoint_image(f"ghcr.io/kube-vip/kube-vip:{versions.KUBE_VIP_VERSION}", "/kube-vip", "kube-vip"),
        entrypoint_image(f"ghcr.io/kube-vip/kube-vip-cloud-provider:{versions.KUBE_VIP_CLOUD_PROVIDER_VERSION}",
                         "/kube-vip-cloud-provider", "kube-vip-cloud-provider")),
}


def image_key(image: oci.Image) -> str:
    """A digest of everything that makes the image: its reference, config and entries (a file's
    path, mode, and its source's path, size and modification time, or its content)."""
    facts: list[object] = [image.reference, repr(image.config), image.base and image_key(image.base)]
    for e in image.entries:
        if isinstance(e, oci.File) and isinstance(e.source, Path):
            try:
                st = e.source.stat()
            except OSError as exc:
                raise LabError(f"image {image.reference}: {e.source} is missing ({exc.strerror}): "
                               "run 'make setup'") from exc
            facts.append([e.path, e.mode, str(e.source), st.st_size, st.st_mtime_ns])
        elif isinstance(e, oci.File):
            facts.append([e.path, e.mode, hashlib.sha256(bytes(e.source)).hexdigest()])
        else:
            facts.append(repr(e))
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def tar_name(reference: str, key: str) -> str:
    return f"{reference.rpartition('/')[2].replace(':', '-')}-{key}.tar"


def ensure(root: Path | None = None, lb: str = "") -> list[Path]:
    """Every image's layout tar (and those of the load balancer ``lb``), written where it is
    missing; their paths, in ``RECIPES`` order."""
    root = root or images_dir()
    out = []
    for make in (*RECIPES, *LB_RECIPES.get(lb, ())):
        image = make()
        path = root / tar_name(image.reference, image_key(image))
        if not path.exists():
            oci.write_layout(image, path)
            for stale in root.glob(tar_name(image.reference, "*")):
                if stale != path:
                    stale.unlink(missing_ok=True)
        out.append(path)
    return out


def import_argv(ctr: Path, address: str, tar: Path) -> list[str]:
    """``ctr`` importing one image's layout tar into the CRI's namespace of the containerd at
    ``address``, unpacked for the snapshotter the kubelet's containers use."""
    return [str(ctr), "--address", address, "--namespace", "k8s.io", "images", "import", str(tar)]
