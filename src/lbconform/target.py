"""The target: the cluster under test, the provider of its LB, the timeouts, and the client.

A real cluster is the target only when a kubeconfig is named; otherwise the target is the
running local cluster (the lab, where lbconform-lab is installed), whose client namespace is
where traffic starts. ``--client-netns`` names such a namespace for any target. Everything a suite needs to
reach the cluster comes from here, resolved once per test process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.kube.rawapi import ApiError, RawApi, api_client
from lbconform.localcluster import the_local_cluster
from lbconform.nsexec import netns_exists
from lbconform.providers.base import Provider
from lbconform.traffic.client import Client

log = logging.getLogger(__name__)

#: A target named by its kubeconfig (a local cluster's target is named after the cluster: ``lab``).
CLUSTER = "cluster"
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


def connect(provider: Provider, *, kubeconfig: str | None = None, context: str | None = None,
            timeout_overrides: list[str] | tuple[str, ...] = (), client_address: str | None = None,
            client_netns: str | None = None, provider_options: list[str] | tuple[str, ...] = ()) -> Target:
    """The target named by ``kubeconfig``, or the running local cluster; bad input is a UsageError."""
    options = parse_options(provider_options)
    provider.configure(None, options)
    provider.check_target(bool(kubeconfig))
    try:
        timeouts = provider.timeouts().with_overrides(list(timeout_overrides))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if client_netns is not None and not netns_exists(client_netns):
        raise UsageError(f"--client-netns {client_netns}: no such network namespace on this machine "
                         "(`ip netns list` names them)")
    kind = CLUSTER
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
    else:
        local = the_local_cluster()
        access = local.running()
        if access is None:
            raise UsageError(f"no {local.name} is running and no --kubeconfig was given: "
                             f"start one with `lbconform {local.name} up` or use `lbconform run`")
        local.check_provider(provider.name)
        kind, path, client_netns = local.name, access.kubeconfig, client_netns or access.client_netns
    try:
        api = RawApi(api_client(path, context))
    except Exception as exc:
        raise UsageError(f"--kubeconfig {path}{f' --context {context}' if context else ''}: {exc}") from None
    target = Target(kind, api, provider, timeouts, Client(client_netns, client_address), path, context)
    try:
        target.kubernetes_version()
    except (ApiError, OSError) as exc:
        raise UsageError(f"the {target.kind} target's apiserver does not answer: {exc}") from None
    provider.configure(target.api, options)
    return target
