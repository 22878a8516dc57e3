"""The lab as the harness's local cluster (entry-point group ``lbconform.local_clusters``): what
``lbconform run`` boots or reuses when no ``--kubeconfig`` is named, and which provider reads
which of the load balancers the lab can run."""

from __future__ import annotations

from lbconform.errors import UsageError
from lbconform.kube.rawapi import RawApi
from lbconform.localcluster import Access, NodePower, Say
from lbconform_lab.cluster import Lab
from lbconform_lab.provider import LabNodes, on_lab
from lbconform_lab.topology import CLIENT_NS

#: Providers of the load balancers a lab can run, by the lab's ``--lb``.
LAB_PROVIDERS = {"reference": "lab", "metallb": "metallb", "kube-vip": "kube-vip"}


def check_lab_lb(provider: str, lab_lb: str) -> None:
    """A provider of a load balancer the lab can run must meet that one: the lab provider reads
    the reference LB, the metallb provider MetalLB, the kube-vip provider kube-vip. Other providers
    are the user's to choose."""
    wanted = LAB_PROVIDERS.get(lab_lb, "")
    if provider in LAB_PROVIDERS.values() and provider != wanted:
        need = next(lb for lb, p in LAB_PROVIDERS.items() if p == provider)
        raise UsageError(f"the running lab runs the {lab_lb} load balancer, not {need}: use --provider "
                         f"{wanted}, or `lbconform lab down` and let the run boot a lab with --lb {need}")


def lab_lb_for(provider: str) -> str:
    """The ``lab up --lb`` that a run with this provider boots (the reference LB for the others)."""
    return next((lb for lb, p in LAB_PROVIDERS.items() if p == provider), "reference")


class LabCluster:
    """The hermetic lab, at its default directory (``$LBCONFORM_LAB_DIR``)."""

    name = "lab"
    default_provider = "lab"

    def running(self) -> Access | None:
        lab = Lab()
        return Access(lab.dir.kubeconfig, CLIENT_NS) if lab.dir.exists() else None

    def clear_leftover(self) -> None:
        Lab().replace_leftover()

    def check_provider(self, provider: str) -> None:
        check_lab_lb(provider, Lab().dir.read().lb)

    def boot(self, provider: str, say: Say) -> Access:
        lab = Lab(progress=say)
        say(f"lab booted in {lab.up(lb=lab_lb_for(provider)).total:.1f}s")
        return Access(lab.dir.kubeconfig, CLIENT_NS)

    def down(self) -> None:
        Lab().down()

    def owns(self, api: RawApi) -> bool:
        return on_lab(api)

    def node_power(self) -> NodePower:
        return LabNodes()
