"""What real lab nodes change on the machine itself, and putting it back: the kubelet's sysctls,
the mount points the nodes need, and the nodes' cgroups.

The kubelet sets six machine-wide sysctls at start (``nodeconfig.KUBELET_SYSCTLS``). The lab sets
them before the first kubelet of any lab starts and keeps the machine's values in one record
under ``topology.LABS_ROOT``, with the labs that hold them and the directories they had to make
(/run/containerd, a node's mount point); the last lab to go puts them back. The record is read
and written under a lock, as two labs may boot or go at once.

A node's cgroup is ``/lbconform/<prefix>/node-N`` in every cgroup v1 hierarchy (the kubelet's
cgroupRoot; containerd and the kubelet in ``system``, the shims in ``shims``, the pods in the
``kubepods`` the kubelet makes). Nodes of different labs never share one, so no kubelet sees
another's pods. A node's processes are all found there, which is how a power cut ends them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from lbconform import signals
from lbconform.errors import LabError
from lbconform.wait import WaitTimeout, poll_until
from lbconform_lab import topology as topo

PROC_SYS: Final = Path("/proc/sys")
RECORD: Final = Path(topo.LABS_ROOT) / "machine.json"
CGROUP_TOP: Final = "lbconform"
#: How long a power cut waits for a node's processes to be gone.
KILL_SECONDS: Final = 10.0
#: How often it kills again what is left (a process forking as it dies).
KILL_ROUND_SECONDS: Final = 0.02


@contextlib.contextmanager
def _locked(record: Path) -> Iterator[None]:
    """The record's directory locked (a lock on the directory itself leaves no file behind)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(record.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass
class Held:
    """The record: the machine's values of the sysctls, the labs holding them, the directories
    the labs made."""

    sysctls: dict[str, int] = field(default_factory=dict)
    labs: list[str] = field(default_factory=list)
    made: list[str] = field(default_factory=list)


def _read(record: Path) -> Held:
    try:
        raw = json.loads(record.read_text())
    except FileNotFoundError:
        return Held()
    return Held({str(k): int(v) for k, v in raw.get("sysctls", {}).items()},
                [str(x) for x in raw.get("labs", [])], [str(x) for x in raw.get("made", [])])


def _write_sysctl(root: Path, key: str, value: int) -> None:
    try:
        (root / key).write_text(f"{value}\n")
    except OSError as exc:
        raise LabError(f"cannot set sysctl {key.replace('/', '.')}={value}: {exc.strerror}") from exc


def hold(lab: str, wanted: Mapping[str, int], dirs: Sequence[Path] = (), record: Path = RECORD,
         root: Path = PROC_SYS) -> None:
    """Set the sysctls ``wanted`` and make the directories ``dirs`` (mount points the nodes need)
    for ``lab``, keeping the machine's values, and which directories the labs made, while any lab
    holds them."""
    with signals.held(), _locked(record):
        held = _read(record)
        for key in wanted:
            held.sysctls.setdefault(key, int((root / key).read_text().split()[0]))
        held.made += [str(d) for d in dirs if not d.exists() and str(d) not in held.made]
        if lab not in held.labs:
            held.labs.append(lab)
        record.write_text(json.dumps(asdict(held), indent=1, sort_keys=True))
        for d in dirs:
            d.mkdir(exist_ok=True)
        for key, value in wanted.items():
            _write_sysctl(root, key, value)


def release(lab: str, record: Path = RECORD, root: Path = PROC_SYS) -> None:
    """``lab`` no longer holds what ``hold`` set; the last lab to let go puts the machine's values
    back and removes the directories the labs made."""
    with signals.held(), _locked(record):
        if not record.exists():
            return
        held = _read(record)
        held.labs = [x for x in held.labs if x != lab]
        if held.labs:
            record.write_text(json.dumps(asdict(held), indent=1, sort_keys=True))
            return
        for key, value in held.sysctls.items():
            _write_sysctl(root, key, value)
        for d in reversed(held.made):
            with contextlib.suppress(OSError):
                Path(d).rmdir()
        record.unlink()


def mount_points(types: tuple[str, ...], mountinfo: str | None = None) -> list[Path]:
    """The mount points of the filesystems of these types (``/proc/self/mountinfo`` unless given);
    every mount point when ``types`` is empty."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    points = []
    for line in text.splitlines():
        pre, _, post = line.partition(" - ")
        if not types or post.split(" ", 1)[0] in types:
            points.append(Path(pre.split()[4]))
    return sorted(points)


def cgroup_v1_roots(mountinfo: str | None = None) -> list[Path]:
    """Every cgroup v1 hierarchy's mount point (the controllers' and the named ones)."""
    return mount_points(("cgroup",), mountinfo)


def cgroup_roots() -> list[Path]:
    """Every cgroup hierarchy's mount point, v1 and v2 (runc may make the node's path in both)."""
    return mount_points(("cgroup", "cgroup2"))


def node_cgroup(node: topo.Node) -> str:
    """The node's cgroup path under each hierarchy's root."""
    return f"/{CGROUP_TOP}/{topo.PREFIX.rstrip('-')}/{node.name}"


def make_cgroup(path: str) -> list[Path]:
    """``path`` in every v1 hierarchy (cpusets filled from their parents); its cgroup.procs files."""
    for root in cgroup_v1_roots():
        here = root
        for part in path.strip("/").split("/"):
            parent, here = here, here / part
            if not here.is_dir():
                here.mkdir()
            for name in ("cpuset.cpus", "cpuset.mems"):
                own = here / name
                if own.exists() and not own.read_text().strip():
                    own.write_text((parent / name).read_text())
    return cgroup_procs(path)


def cgroup_procs(path: str) -> list[Path]:
    """The cgroup.procs files of ``path`` in every v1 hierarchy (made by ``make_cgroup``)."""
    return [root / path.strip("/") / "cgroup.procs" for root in cgroup_v1_roots()]


def pids_in(path: str) -> set[int]:
    """Every process in ``path`` or below it, in any hierarchy."""
    pids: set[int] = set()
    for root in cgroup_roots():
        top = root / path.strip("/")
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in procs.read_text().split())
    return pids


def kill_cgroup(path: str, timeout: float = KILL_SECONDS) -> None:
    """SIGKILL every process in ``path`` and below until none is left (a process forking as it
    dies is caught on the next round)."""
    def none_left() -> bool:
        pids = pids_in(path)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    try:
        poll_until(none_left, timeout=timeout, interval=KILL_ROUND_SECONDS, retry_on=(),
                   description=f"every process in cgroup {path} to die of SIGKILL")
    except WaitTimeout as exc:
        raise LabError(f"processes {sorted(pids_in(path))} in cgroup {path} outlived {timeout:g}s of "
                       "SIGKILL") from exc


def remove_cgroup(path: str) -> None:
    """Remove ``path`` and everything below it in every hierarchy (its processes gone), deepest
    first; then its parents under ``CGROUP_TOP`` that are left empty."""
    parts = path.strip("/").split("/")
    for root in cgroup_roots():
        top = root / path.strip("/")
        if top.is_dir():
            below = [p for p in top.rglob("*") if p.is_dir()]
            for d in sorted(below, key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
        for i in range(len(parts) - 1, 0, -1):
            with contextlib.suppress(OSError):
                (root / "/".join(parts[:i])).rmdir()
