"""Starting, marking and stopping the traffic an experiment measures.

The traffic is lbconform's open-loop request loop in a detached recorder process, aimed at
the Service's load-balancer address (from its status) or at ``address`` when given. Against
a local cluster (the lab) it starts in that cluster's client namespace (``netns`` "auto"),
whichever LB it runs: its addresses are routed nowhere else.
"""

from __future__ import annotations

import time
from typing import Any

from chaoslib.exceptions import ActivityFailed

from lbconform.chaos.context import Configuration, kube_api
from lbconform.chaos.traffic import recording
from lbconform.kube.jig import ServiceJig
from lbconform.kube.manifests import Applier
from lbconform.kube.rawapi import ApiError
from lbconform.localcluster import LocalCluster, owner_of
from lbconform.traffic.requests import NEW_CONNECTION

__all__ = ["mark_traffic", "start_traffic", "stop_traffic"]

#: ``netns`` value that means: the local cluster's client namespace when the cluster is one, else none.
AUTO = "auto"


def service_address(ns: str, service: str) -> str:
    """The first ingress address (IP, else hostname) in the Service's ``status.loadBalancer``."""
    try:
        address = ServiceJig(Applier(kube_api(), ns), service).ingress()
    except (ApiError, OSError) as exc:
        raise ActivityFailed(f"service {ns}/{service}: {exc}") from None
    if address:
        return address
    raise ActivityFailed(f"service {ns}/{service} has no load-balancer ingress address yet")


def traffic_netns(netns: str, configuration: Configuration) -> str:
    """Where the traffic starts: ``netns`` as given, or for AUTO the client namespace of the local
    cluster (the lab) whose apiserver the experiment's cluster is, whichever LB it runs, else here."""
    if netns != AUTO:
        return netns
    local = local_owner()
    access = local.running() if local is not None else None
    return (access.client_netns or "") if access is not None else ""


def local_owner() -> LocalCluster | None:
    """The local cluster whose apiserver the experiment's cluster is, if any."""
    try:
        return owner_of(kube_api())
    except ActivityFailed:  # no kubeconfig: not a local cluster
        return None


def start_traffic(ns: str = "default", service: str = "backend", port: int = 80, rate: float = 20.0,
                  seconds: float = 60.0, address: str = "", netns: str = AUTO,
                  variant: str = NEW_CONNECTION, request_timeout: float = 3.0, path: str = "/hostname",
                  name: str = "traffic", configuration: Configuration = None) -> dict[str, Any]:
    """Send ``rate`` HTTP GETs of ``path`` per second to Service ``ns``/``service`` on ``port``,
    for ``seconds``, from a detached recorder process; ``address`` replaces the Service's
    load-balancer address. ``variant`` is new-connection (one connection per request) or
    keep-alive. Probes ``traffic_failures`` and ``traffic_resets`` read the result by ``name``.
    """
    target = address or service_address(ns, service)
    where = traffic_netns(netns, configuration)
    if not where and (local := local_owner()) is not None:
        raise ActivityFailed(f"{target} is an address of the local {local.name}, routed only inside it: "
                             "traffic to it starts in its client namespace (netns auto), never here")
    argv = ["--address", target, "--port", str(int(port)), "--rate", str(float(rate)),
            "--seconds", str(float(seconds)), "--variant", variant, "--timeout", str(float(request_timeout)),
            "--path", path]
    if where:
        argv += ["--netns", where]
    directory = recording.state_dir((configuration or {}).get("lbconform_state_dir"))
    rec = recording.start(name, argv, float(seconds), directory)
    return {"pid": rec.proc.pid, "address": target, "port": int(port), "netns": where,
            "rate": float(rate), "seconds": float(seconds), "result_file": str(rec.out)}


def mark_traffic(label: str, name: str = "traffic") -> float:
    """Mark now (wall clock) as ``label`` in the running traffic ``name``: the probes can count
    only what failed after a mark (``since_mark``), such as after a Deployment is back."""
    rec = recording.get(name)
    if rec is None:
        raise ActivityFailed(f"no traffic named {name} was started in this run")
    rec.marks[label] = time.time()
    return rec.marks[label]


def stop_traffic(name: str = "traffic") -> dict[str, Any] | None:
    """End the traffic ``name`` if its recorder still runs (a rollback's cleanup) and forget it;
    returns its result where a probe already read it."""
    rec = recording.forget(name)
    return rec.result if rec is not None else None
