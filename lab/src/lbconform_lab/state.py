"""The lab directory: the one place that says what a lab made, so that it can unmake it.

Everything the lab creates is written here *before* it is created (namespaces, processes),
so a crash half-way still leaves a record that ``lab down`` can clean up from. The
directory doubles as the lock: a second ``lab up`` finds it and refuses to clobber it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lbconform.errors import LabError
from lbconform_lab import topology as topo


def default_lab_dir() -> Path:
    """``$LBCONFORM_LAB_DIR``, else this process's lab instance's own (``topology``)."""
    env = os.environ.get("LBCONFORM_LAB_DIR")
    return Path(env) if env else Path(topo.DEFAULT_LAB_DIR)


@dataclass
class Process:
    """A process the lab started, identified by pid *and* start time against pid reuse."""

    name: str
    pid: int
    start_ticks: int
    netns: str | None
    log: str


@dataclass
class LabState:
    """What one lab is made of; persisted as state.json in the lab directory."""

    nodes: int
    api_port: int
    created: float = field(default_factory=time.time)
    ready: bool = False
    #: The lab's load balancer: "reference" (this project's), "metallb" or "kube-vip".
    lb: str = "reference"
    lb_mode: str = "node"
    lb_defects: list[str] = field(default_factory=list)
    #: What runs the nodes' pods: "agent" or "containerd" (``cluster.NODE_RUNTIMES``).
    node_runtime: str = "agent"
    namespaces: list[str] = field(default_factory=list)
    processes: dict[str, Process] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LabState:
        raw: dict[str, Any] = json.loads(text)
        procs = {k: Process(**v) for k, v in raw.pop("processes", {}).items()}
        return cls(processes=procs, **raw)


class LabDir:
    """Paths inside the lab directory and the state file's reads and writes."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_lab_dir()

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig for the root namespace, through the loopback forward."""
        return self.root / "kubeconfig"

    @property
    def lab_kubeconfig(self) -> Path:
        """Admin kubeconfig for processes inside the lab's namespaces (the client's)."""
        return self.root / "kubeconfig-lab"

    def kubelet_serving(self, node: str) -> tuple[Path, Path]:
        """Certificate and key a node's kubelet API serves (for its IP and name, from the lab's CA)."""
        return self.pki / f"kubelet-{node}.crt", self.pki / f"kubelet-{node}.key"

    def kubelet_client(self) -> tuple[Path, Path]:
        """Certificate and key the apiserver presents to the nodes' kubelet API."""
        return self.pki / "apiserver-kubelet-client.crt", self.pki / "apiserver-kubelet-client.key"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def sandboxes_dir(self, node: str) -> Path:
        """One file per pod network namespace a node agent made: written before it makes it."""
        return self.node_dir(node) / "sandboxes"

    def recorded_sandboxes(self, node: str | None = None) -> list[str]:
        """Pod namespaces recorded by one node's agent, or by all of them."""
        dirs = [self.sandboxes_dir(node)] if node else sorted((self.root / "nodes").glob("*/sandboxes"))
        return sorted(rec.name for d in dirs if d.is_dir() for rec in d.iterdir())

    def exists(self) -> bool:
        return self.state_file.exists()

    def read(self) -> LabState:
        try:
            return LabState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            raise LabError(
                f"no lab is running (no {self.state_file}): start one with 'lbconform lab up'"
            ) from None
        except (ValueError, TypeError) as exc:
            raise LabError(
                f"{self.state_file} is damaged ({exc}): remove the lab with 'lbconform lab down'"
            ) from exc

    def write(self, state: LabState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)
