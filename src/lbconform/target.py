"""The target: the cluster under test, the provider of its LB, the timeouts, and the client.

A real cluster is the target only when a kubeconfig is named; otherwise the target is the
running lab, whose client namespace is where traffic starts. Everything a suite needs to
reach the cluster comes from here, resolved once per test process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.kube.rawapi import ApiError, RawApi, api_client
from lbconform.providers.base import Provider
from lbconform.traffic.client import Client

log = logging.getLogger(__name__)

LAB, CLUSTER = "lab", "cluster"
#: The node label that takes a node out of every external load balancer (k8s.io/cloud-provider's
#: contract, which MetalLB's speakers honour too).
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


@dataclass
class Target:
    kind: str
    api: RawApi
    provider: Provider
    timeouts: Timeouts
    client: Client
    kubeconfig: Path
    context: str | None = None
    _nodes: dict[str, str] = field(default_factory=dict)

    def node_addresses(self) -> dict[str, str]:
        """Node name -> InternalIP, of every node."""
        if not self._nodes:
            for n in self.api.get("/api/v1/nodes").get("items", []):
                addrs = {a["type"]: a["address"] for a in n.get("status", {}).get("addresses", [])}
                self._nodes[n["metadata"]["name"]] = addrs.get("InternalIP", "")
        return dict(self._nodes)

    def excluded_nodes(self) -> set[str]:
        """Names of the nodes labelled to be excluded from external load balancers, now (not
        cached: a test labels and unlabels nodes)."""
        return {n["metadata"]["name"] for n in self.api.get("/api/v1/nodes").get("items", [])
                if EXCLUDE_LABEL in (n["metadata"].get("labels") or {})}

    def kubernetes_version(self) -> str:
        return str(self.api.get("/version").get("gitVersion", "unknown"))


def parse_options(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``NAME=VALUE`` strings of ``--provider-option``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--provider-option {item!r}: use NAME=VALUE")
        out[name.strip()] = value
    return out


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


def connect(provider: Provider, *, kubeconfig: str | None = None, context: str | None = None,
            timeout_overrides: list[str] | tuple[str, ...] = (), client_address: str | None = None,
            provider_options: list[str] | tuple[str, ...] = ()) -> Target:
    """The target named by ``kubeconfig``, or the running lab; bad input is a UsageError."""
    options = parse_options(provider_options)
    provider.configure(None, options)
    try:
        timeouts = provider.timeouts().with_overrides(list(timeout_overrides))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if kubeconfig and provider.name == "lab":
        raise UsageError("the lab provider reads the lab's own load balancer: drop --kubeconfig to target "
                         "the lab, or name the cluster's provider with --provider")
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
        try:
            api = RawApi(api_client(path, context))
        except Exception as exc:
            raise UsageError(f"--kubeconfig {kubeconfig}"
                             f"{f' --context {context}' if context else ''}: {exc}") from None
        target = Target(CLUSTER, api, provider, timeouts, Client(address=client_address), path, context)
    else:
        from lbconform.lab.cluster import Lab
        from lbconform.lab.topology import CLIENT_NS

        lab = Lab()
        if not lab.dir.exists():
            raise UsageError("no lab is running and no --kubeconfig was given: "
                             "start one with `lbconform lab up` or use `lbconform run`")
        check_lab_lb(provider.name, lab.dir.read().lb)
        target = Target(LAB, lab.api(), provider, timeouts, Client(CLIENT_NS, client_address),
                        lab.dir.kubeconfig)
    try:
        target.kubernetes_version()
    except (ApiError, OSError) as exc:
        raise UsageError(f"the {target.kind} target's apiserver does not answer: {exc}") from None
    provider.configure(target.api, options)
    return target
