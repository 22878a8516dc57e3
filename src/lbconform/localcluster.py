"""A cluster that a plugin runs on this machine: the target when no ``--kubeconfig`` is named.

The harness knows clusters only through a kubeconfig. A distribution that runs a whole cluster
locally (``lbconform-lab``, the hermetic lab) registers one object under the
``lbconform.local_clusters`` entry-point group; this module is the harness's side of that
contract. Through it ``lbconform run`` boots or reuses the cluster, learns its kubeconfig and the
network namespace its clients send from, and a provider of an implementation that has no
machines of its own (MetalLB, kube-vip) finds someone who can power its nodes off and on. With
no such distribution installed the harness runs against any kubeconfig and nothing of a lab is
imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lbconform.errors import UsageError

if TYPE_CHECKING:
    from lbconform.kube.rawapi import RawApi

GROUP = "lbconform.local_clusters"

Say = Callable[[str], None]


@dataclass(frozen=True)
class Access:
    """How to reach a running local cluster: its kubeconfig, and the network namespace on this
    machine from which clients reach its load balancers' addresses (None: this namespace)."""

    kubeconfig: Path
    client_netns: str | None = None


@runtime_checkable
class NodePower(Protocol):
    """What the machines under a cluster's nodes can do for the chaos experiments: a node dies as
    a machine does and comes back, a node's kube-proxy restarts."""

    def kill_node(self, name: str) -> None: ...

    def start_node(self, name: str) -> None: ...

    def restart_kube_proxy(self, node: str) -> None: ...


@runtime_checkable
class LocalCluster(Protocol):
    """The object a local-cluster distribution registers."""

    #: What a report calls a target of this kind (``lab``).
    name: str
    #: The provider of the load balancer it runs unless told otherwise.
    default_provider: str

    def running(self) -> Access | None:
        """The cluster that runs now, or None."""
        ...

    def clear_leftover(self) -> None:
        """Remove what a crashed run left behind (a cluster none of whose processes is alive)."""
        ...

    def check_provider(self, provider: str) -> None:
        """A UsageError, before anything is made, when ``provider`` cannot read the load balancer
        the running cluster runs."""
        ...

    def boot(self, provider: str, say: Say) -> Access:
        """Boot a cluster whose load balancer ``provider`` reads."""
        ...

    def down(self) -> None:
        """Remove everything the cluster made."""
        ...

    def owns(self, api: RawApi) -> bool:
        """Whether ``api`` is this cluster's apiserver."""
        ...

    def node_power(self) -> NodePower:
        """Power over this cluster's nodes."""
        ...


def installed() -> list[LocalCluster]:
    """Every registered local cluster (the lab, where ``lbconform-lab`` is installed)."""
    found = []
    for ep in entry_points(group=GROUP):
        obj = ep.load()()
        if not isinstance(obj, LocalCluster):
            raise UsageError(f"{ep.value} under {GROUP} is not an lbconform LocalCluster")
        found.append(obj)
    return found


def the_local_cluster() -> LocalCluster:
    """The one local cluster a run without ``--kubeconfig`` targets; one line when there is none."""
    found = installed()
    if not found:
        raise UsageError("no --kubeconfig was given and no local cluster is installed: name your cluster "
                         "with --kubeconfig (or install lbconform-lab for the hermetic lab)")
    return found[0]


def kubeconfig_of(kubeconfig: str | None) -> Path:
    """The kubeconfig the user named, else the running local cluster's; one line when neither."""
    if kubeconfig:
        return Path(kubeconfig).expanduser()
    local = the_local_cluster()
    access = local.running()
    if access is None:
        raise UsageError(f"no {local.name} is running and no --kubeconfig was given: name the cluster "
                         f"with --kubeconfig, or start one with `lbconform {local.name} up`")
    return access.kubeconfig


def owner_of(api: RawApi | None) -> LocalCluster | None:
    """The local cluster whose apiserver ``api`` is, if any."""
    if api is None:
        return None
    return next((c for c in installed() if c.owns(api)), None)
