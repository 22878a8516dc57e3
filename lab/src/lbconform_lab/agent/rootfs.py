"""A container's filesystem: the machine's, seen through a private, copy-on-write mount namespace.

There are no images in the lab, so a container's root is the machine's own root filesystem,
but never the machine's to change: each container starts in a mount namespace of its own
(``unshare --mount``, propagation private, so nothing it mounts is seen outside), whose root
is an overlay with the machine's ``/`` as its read-only lower layer and an in-memory upper
layer that dies with the namespace. What a pod writes to /etc or /var stays in that layer.
Its /proc and /sys are mounted afresh, so /sys/class/net lists the pod's own network
namespace's interfaces (what a program choosing an interface reads, MetalLB's speaker among
them), not the machine's; the machine's cgroup tree is bound back under it.

Hidden behind empty in-memory directories: /run and /tmp (the lab's own directory, its
keys and kubeconfigs, and network-namespace handles live there), $HOME (kubeconfigs, tool
credentials), /etc/kubernetes (a kubeadm host's kubeconfigs), and the lab directory wherever
it is; the few paths a container's program is run from (the built binaries, this Python) are
bound back read-only when hidden. Then, as the kubelet does: /etc/hostname and /etc/hosts name
the pod, and each volume is bound at its mount path (read-only when asked). The container's
program starts inside, after ``pivot_root`` has detached the machine's root.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import lbconform
import lbconform_lab
from lbconform import resources
from lbconform.cache import cache_root

#: Shell run inside the new mount and UTS namespaces; $0 is the scratch directory, then the
#: hostname, the pod IP, the working directory, the count of hidden paths, the hidden paths,
#: the count of (source, target, ro, kind) mount quads, the quads, and "--" before the program.
#: Its stdin is closed (replaced by /dev/null) once the root is in place, just before the program
#: starts: ``containers.Container.start`` waits for that, on a pipe it gave as stdin.
_SETUP = r'''
set -e
scratch=$0 host=$1 ip=$2 wd=$3; shift 3
mount -t tmpfs -o mode=0755 lbc-layer "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
r=$scratch/root
mount -t overlay lbc-root -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$r"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t sysfs lbc-sys "$r/sys"
if [ -d /sys/fs/cgroup ]; then mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"; fi
n=$1; shift
while [ "$n" -gt 0 ]; do
  mkdir -p "$r$1"; mount -t tmpfs -o mode=0755 lbc-hidden "$r$1"; shift; n=$((n - 1))
done
n=$1; shift
while [ "$n" -gt 0 ]; do
  if [ "$4" = file ]; then mkdir -p "$(dirname "$r$2")"; : > "$r$2"; else mkdir -p "$r$2"; fi
  mount --bind "$1" "$r$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$r$2"; fi
  shift 4; n=$((n - 1))
done
[ "$1" = -- ] && shift
echo "$host" > /proc/sys/kernel/hostname
echo "$host" > "$r/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n' \
  "$ip" "$host" > "$r/etc/hosts"
cd "$r"
pivot_root . .
umount -l .
cd "$wd" 2>/dev/null || cd /
exec </dev/null
exec "$@"
'''

#: Where a program may not look: hidden behind an empty directory in every container.
#: /etc/kubernetes is a kubeadm host's kubeconfigs, which kube-vip reads before its in-cluster
#: credentials: a pod must never act as the machine's admin.
HIDDEN = ("/run", "/tmp", "/var/tmp", "/etc/kubernetes")


@dataclass(frozen=True)
class Mount:
    """A path of the machine bound into the container."""

    source: Path
    target: str
    read_only: bool = True

    def quad(self) -> list[str]:
        return [str(self.source), in_root(self.target), "ro" if self.read_only else "rw",
                "dir" if self.source.is_dir() else "file"]


def in_root(path: str) -> str:
    """Where ``path`` is in a container's root, with the machine's symlinks followed.

    The root's lower layer is the machine's, so its symlinks are the machine's: followed
    inside the new root they would leave it (/var/run -> /run names the machine's /run while
    the setup still runs there). Resolving them here keeps every mount inside the container.
    """
    return os.path.realpath(path)


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def hidden_paths(lab_dir: Path) -> list[str]:
    """The machine's paths a container never sees: the fixed ones, $HOME and the lab directory."""
    paths: list[str] = []
    for extra in (*HIDDEN, str(Path.home()), str(lab_dir)):
        real = in_root(extra)
        if real != "/" and not any(_under(Path(real), Path(h)) for h in paths):
            paths.append(real)
    return paths


def program_paths() -> list[Path]:
    """What a container's program runs from: the built binaries, this Python (its venv and the
    installation the venv points at), and lbconform itself with its data folders (a Locust
    worker pod runs a locustfile from there)."""
    paths = [cache_root().resolve() / "bin", Path(sys.prefix).resolve(),
             Path(sys.base_prefix).resolve(), Path(lbconform.__file__).resolve().parents[1],
             Path(lbconform_lab.__file__).resolve().parents[1]]
    with contextlib.suppress(FileNotFoundError):
        paths.append(resources.data_dir("locustfiles").resolve())
    return paths


def container_argv(scratch: Path, hostname: str, pod_ip: str, workdir: str, lab_dir: Path,
                   mounts: Sequence[Mount], argv: Sequence[str]) -> list[str]:
    """argv that runs ``argv`` as a container: new mount and UTS namespaces, the overlay root,
    the hidden paths, the program paths bound back where hidden, and ``mounts``. The program's
    stdin is /dev/null; the setup's is closed once the root is in place."""
    hidden = hidden_paths(lab_dir)
    back = [Mount(p, str(p)) for p in program_paths()
            if p.exists() and any(_under(p, Path(h)) for h in hidden)]
    binds = [*back, *mounts]
    scratch.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", _SETUP,
            str(scratch), hostname, pod_ip or "127.0.0.1", workdir or "/",
            str(len(hidden)), *hidden,
            str(len(binds)), *[x for m in binds for x in m.quad()],
            "--", *argv]


def exec_argv(pid: int, argv: Sequence[str]) -> list[str]:
    """argv that runs a command inside a running container's namespaces (exec probes and hooks)."""
    return ["nsenter", f"--target={pid}", "--mount", "--uts", "--net", "--", *argv]


def pod_scratch_dir(node_dir: Path, pod_uid: str) -> Path:
    return node_dir / "containers" / pod_uid


def scratch_dir(node_dir: Path, pod_uid: str, container: str) -> Path:
    """The (empty) directory a container's in-memory layer is mounted on."""
    return pod_scratch_dir(node_dir, pod_uid) / container
