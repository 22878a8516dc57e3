"""A real lab node: the kubelet and containerd (with runc and the CNI plugins) in the node's own
namespaces, started, cut off and removed.

A node is its network namespace (``network``) plus a mount and a UTS namespace of its own, kept as
files in its directory: its hostname is its name (a hostNetwork pod sees it), and it has a tmpfs
over /var/lib, /var/log and /run/containerd and a resolv.conf naming no server, so that what the
kubelet and containerd keep at fixed paths (the device-plugin socket, the pods' logs, the shims'
sockets) is the node's alone and no name resolves (an image the lab does not hold fails to pull
at once, as on a cluster without a registry). Its processes run in its cgroup (``machine``).

A power cut (``cut``) SIGKILLs the node's kubelet, containerd and kube-proxy and every process in
its cgroup, then unmounts what the node had: its pods are gone as a VM's are. A start after it
(``start_containerd``, ``import_images``, ``start_kubelet``) is a boot: fresh tmpfs, containerd's
state made anew (its root, with the images, kept as a disk's), and the kubelet starts the node's
pods again.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from lbconform.errors import LabError
from lbconform.nsexec import in_netns
from lbconform.wait import WaitTimeout, poll_until
from lbconform_lab import build, images, machine, nodeconfig
from lbconform_lab import topology as topo
from lbconform_lab.nodeconfig import NodePaths

#: How long containerd takes to listen on its socket after it starts.
CONTAINERD_READY_SECONDS: Final = 20.0
#: How long a removal tries to delete containerd's directory of a node whose power was cut.
CONTAINERD_GONE_SECONDS: Final = 5.0
#: How often the image imports are checked for an end, and how long they may take in all (about
#: 8 s for three nodes on two cores).
IMPORT_POLL_SECONDS: Final = 0.02
IMPORTS_SECONDS: Final = 120.0
#: The node's mount namespace, as run inside it at creation ($1 the resolv.conf, $2 the hostname).
#: Its copies of the machine's namespace files (other nodes', other labs', /run/netns) go first:
#: a copy would keep that namespace alive as long as this node's mounts live.
_MOUNTS = r'''
set -e
sed -n 's/^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) .* - nsfs .*/\1/p' /proc/self/mountinfo | sort -r |
  while read -r m; do umount -l "$m" 2>/dev/null || true; done
for d in /var/lib /var/log /run/containerd; do mount -t tmpfs -o mode=0755 lbc-node "$d"; done
mount --bind "$1" /etc/resolv.conf
hostname "$2"
'''

#: The machine's directories a node mounts its own over (``machine.hold`` makes them if missing).
MACHINE_DIRS: Final = (Path("/run/containerd"),)

Spawn = Callable[[str, list[str]], object]


def paths(node: topo.Node, node_dir: Path) -> NodePaths:
    return NodePaths(node=node, dir=node_dir, cgroup=machine.node_cgroup(node),
                     bin_dir=build.binary("runc").parent, cni_bin_dir=build.binary("ptp").parent)


def _ns_dir(p: NodePaths) -> Path:
    return p.dir / "ns"


def enter_argv(p: NodePaths, argv: list[str]) -> list[str]:
    """``argv`` run in the node's network, mount and UTS namespaces, in its ``system`` cgroup
    (made by ``prepare``)."""
    procs = [str(f) for f in machine.cgroup_procs(p.system_cgroup)]
    return ["sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"', "join",
            *procs, "--", *enter_argv_plain(p, argv)]


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"'{' '.join(argv[:4])} ...' failed: {(done.stderr or done.stdout).strip()}")


def prepare(p: NodePaths, ca: Path, serving: tuple[Path, Path]) -> None:
    """The node's files, cgroups and namespaces, made as a boot finds them (fresh state)."""
    for d in (p.containerd_root, p.cni_conf_dir, p.cni_ipam_dir, p.runc_root):
        d.mkdir(parents=True, exist_ok=True)
    for fresh in (p.containerd_state, p.sockets):
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
    p.containerd_config.write_text(nodeconfig.containerd_toml(p))
    p.cni_template.write_text(nodeconfig.cni_template(p))
    p.kubelet_config.write_text(nodeconfig.kubelet_yaml(p, ca, serving))
    p.resolv_conf.write_text("# a lab node resolves no name\n")
    machine.make_cgroup(p.system_cgroup)
    machine.make_cgroup(p.shims_cgroup)
    ns = _ns_dir(p)
    ns.mkdir(exist_ok=True)
    if not _is_mount(ns):
        # A namespace file must be bound on a mount that does not propagate: the directory's own.
        _run(["mount", "--bind", str(ns), str(ns)])
        _run(["mount", "--make-private", str(ns)])
    for name in ("mnt", "uts"):
        (ns / name).touch()
    _run(["unshare", f"--mount={ns / 'mnt'}", f"--uts={ns / 'uts'}", "--propagation", "private", "--",
          "sh", "-c", _MOUNTS, "mounts", str(p.resolv_conf), p.node.name])


def _is_mount(path: Path) -> bool:
    return path in machine.mount_points(())


def start_containerd(p: NodePaths, spawn: Spawn) -> None:
    """The node's containerd, started by ``spawn(name, argv)``; returns once it listens."""
    containerd = nodeconfig.containerd_args(build.binary("containerd"), p)
    spawn(f"containerd-{p.node.name}", enter_argv(p, containerd))
    poll_until(lambda: _listens(p.socket), timeout=CONTAINERD_READY_SECONDS, interval=0.05,
               description=f"{p.node.name}'s containerd to listen")


def import_images(nodes: Sequence[NodePaths], tars: Sequence[Path]) -> None:
    """Every image tar into each node's containerd, each node's in order, the nodes side by side
    (one import per node at a time: unpacking layers keeps both cores busy with three nodes). An
    import that fails, outlives ``IMPORTS_SECONDS`` or is interrupted ends the others before it
    is raised."""
    ctr = build.binary("ctr")
    todo = {p.node.name: (p, list(tars)) for p in nodes} if tars else {}
    running: dict[str, tuple[subprocess.Popen[str], Path]] = {}

    def step() -> bool:
        for name, (p, left) in todo.items():
            if name not in running and left:
                argv = enter_argv_plain(p, images.import_argv(ctr, str(p.socket), left[0]))
                running[name] = (subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                  text=True), left.pop(0))
        for name, (proc, tar) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            err = proc.communicate()[1].strip()
            if proc.returncode != 0:
                raise LabError(f"{name}: importing {tar.name} into its containerd failed: {err}")
            if not todo[name][1]:
                del todo[name]
        return not todo

    try:
        poll_until(step, timeout=IMPORTS_SECONDS, interval=IMPORT_POLL_SECONDS, retry_on=(),
                   description="every node's containerd to import the lab's images")
    except WaitTimeout as exc:
        late = ", ".join(f"{name} ({tar.name})" for name, (_, tar) in running.items())
        raise LabError(f"importing the images outlived {IMPORTS_SECONDS:g}s on {late}") from exc
    finally:
        for proc, _ in running.values():
            proc.kill()
        for proc, _ in running.values():
            proc.communicate()


def start_kubelet(p: NodePaths, spawn: Spawn, kubeconfig: Path) -> None:
    """The node's kubelet (once its containerd holds the images), started by ``spawn``."""
    kubelet = nodeconfig.kubelet_args(build.binary("kubelet"), p, kubeconfig)
    spawn(f"kubelet-{p.node.name}", enter_argv(p, kubelet))


def _listens(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def enter_argv_plain(p: NodePaths, argv: list[str]) -> list[str]:
    """``argv`` in the node's namespaces, in the caller's cgroup (a short-lived command)."""
    ns = _ns_dir(p)
    return in_netns(p.node.netns, ["nsenter", f"--mount={ns / 'mnt'}", f"--uts={ns / 'uts'}", "--", *argv])


def cut(p: NodePaths) -> None:
    """Every process of the node killed (its cgroup's, its daemons' with it) and its namespaces'
    mounts gone; its containerd root stays."""
    machine.kill_cgroup(p.cgroup)
    ns = _ns_dir(p)
    for name in ("mnt", "uts"):
        with contextlib.suppress(LabError):
            _run(["umount", str(ns / name)])


def remove(p: NodePaths) -> None:
    """After ``cut``: the node's cgroups and the mount its namespace files were bound on, gone."""
    machine.remove_cgroup(p.cgroup)
    ns = _ns_dir(p)
    if _is_mount(ns):
        with contextlib.suppress(LabError):
            _run(["umount", str(ns)])
    # Mounts of pods' network namespaces and volumes live in the node's mount namespace, gone
    # with it; containerd's state is a plain directory here.
    def removed() -> bool:
        shutil.rmtree(p.dir / "containerd", ignore_errors=True)
        return not (p.dir / "containerd").exists()

    # A shim that died with the node may hold a file open for a moment.
    with contextlib.suppress(WaitTimeout):
        poll_until(removed, timeout=CONTAINERD_GONE_SECONDS, interval=0.1, retry_on=(),
                   description=f"{p.node.name}'s containerd directory to be removed")
