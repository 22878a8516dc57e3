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

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

from lbconform.cache import cache_root
from lbconform.errors import LabError
from lbconform_lab import build, oci, versions

PAUSE: Final = "registry.k8s.io/pause:3.10.1"
AGNHOST: Final = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
#: Debian's static busybox (package busybox-static): the shell and small tools of images whose
#: upstream base is Alpine.
BUSYBOX: Final = Path("/bin/busybox")
#: Programs from this machine's packages that upstream's agnhost image carries, by their path
#: in the image: curl, and OpenBSD's nc (busybox's has no -z, -u or -v).
AGNHOST_TOOLS: Final = {"/usr/bin/curl": Path("/usr/bin/curl"), "/usr/bin/nc": Path("/bin/nc.openbsd")}
#: The Debian packages those come from (``make setup`` installs them).
DEBS: Final = ("busybox-static", "curl", "netcat-openbsd")


def missing() -> list[str]:
    """The machine's files the images take that it lacks (from ``DEBS``)."""
    return [str(p) for p in (BUSYBOX, *AGNHOST_TOOLS.values()) if not p.is_file()]


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


def entrypoint_image(reference: str, path: str, binary: str) -> Callable[[], oci.Image]:
    """An image of one built program at ``path``, its entrypoint."""
    def make() -> oci.Image:
        return oci.Image(reference, [oci.File(path, build.binary(binary), 0o755)],
                         oci.Config(entrypoint=[path]))
    return make


#: Every image a real node holds, made from this machine's files at each call.
RECIPES: Final[tuple[Callable[[], oci.Image], ...]] = (pause, agnhost)
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
    facts: list[object] = [image.reference, repr(image.config)]
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
