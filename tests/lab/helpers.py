"""What the lab tests share: traffic from the client namespace and small observers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

from lbconform.kube import objects
from lbconform.kube.manifests import Applier, Tweak, load
from lbconform.kube.rawapi import Json, RawApi
from lbconform.kube.workload import QUIET_KIND, ensure_quiet_program
from lbconform_lab import netns as ns
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab
from lbconform_lab.probe import http_status


def client_get(host: str, port: int, path: str, timeout: float = 2.0) -> tuple[int, str]:
    """One HTTP GET on a new connection, sent from the lab's client namespace."""
    return http_status(topo.CLIENT_NS, host, port, path, timeout=timeout)


def deploy_backend(ns: Applier, *tweaks: Tweak, kind: str = "deployment") -> tuple[Json, Json]:
    """The backend workload (``kind`` as ``lbconform.kube.workload.KINDS``) and its Service,
    created and rolled out; returns both objects."""
    if kind == QUIET_KIND:
        ensure_quiet_program(ns)
    workload = ns.create(load(f"backend-{kind}", *tweaks)[0])
    service = ns.create(load("backend-service", *tweaks)[0])
    assert ns.namespace is not None
    if workload["kind"] == "Deployment":
        objects.wait_for_deployment(ns.api, ns.namespace, workload["metadata"]["name"])
    else:
        objects.wait_for_daemonset(ns.api, ns.namespace, workload["metadata"]["name"])
    return workload, service


def node_port(service: Json) -> int:
    return int(service["spec"]["ports"][0]["nodePort"])


def wait_for_node_ports(service: Json, nodes: int = 3, timeout: float = 10) -> None:
    """Wait until every node forwards ``service`` (traffic policy Cluster): its NodePort answers
    from each. The LB's healthy set does not say so: a Cluster Service is checked on kube-proxy's
    /healthz, which passes before that kube-proxy has the Service's endpoints (it refuses until then)."""
    from lbconform.wait import poll_until

    port = node_port(service)
    for node in topo.nodes(nodes):
        poll_until(lambda ip=node.ip: client_get(ip, port, "/hostname")[0] == 200, timeout=timeout,
                   interval=0.1, retry_on=(OSError,), description=f"{node.name} to forward NodePort {port}")


def pods_by_node(api: RawApi, namespace: str) -> dict[str, Json]:
    return {p["spec"]["nodeName"]: p for p in objects.pods(api, namespace, "app=backend")
            if not p["metadata"].get("deletionTimestamp")}


def health_check(node: topo.Node, port: int) -> tuple[int, dict[str, Any]]:
    status, body = client_get(node.ip, port, "/healthz")
    return status, json.loads(body)


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.t0


def lab_lb(**values: object) -> Tweak:
    """Annotations of the lab's reference LB, e.g. ``lab_lb(mode="pod", idle_timeout_seconds=3)``."""
    from lbconform.kube.tweaks import service_annotations

    return service_annotations({f"lab.lbconform.io/{k.replace('_', '-')}": str(v) for k, v in values.items()})


def wait_for_vip(api: RawApi, namespace: str, name: str = "backend", timeout: float = 10) -> str:
    from lbconform.kube.jig import ServiceJig

    return ServiceJig(Applier(api, namespace), name).wait_for_load_balancer(timeout)


def wait_until_gone(api: RawApi, path: str, what: str, timeout: float = 10) -> None:
    """Wait until the object at ``path`` is gone (a 404), ``what`` saying what goes."""
    from lbconform.kube.rawapi import ApiError
    from lbconform.wait import poll_until

    def gone() -> bool:
        try:
            api.get(path)
        except ApiError as exc:
            return exc.status == 404
        return False

    poll_until(gone, timeout=timeout, description=what)


def wait_for_healthy(namespace: str, want: set[str] | int, name: str = "backend",
                     timeout: float = 30) -> list[str]:
    """Wait until the lab LB's healthy set is ``want`` (a set of names, or a size)."""
    from lbconform.wait import poll_until
    from lbconform_lab.lb.client import LabLB

    lb = LabLB()

    def healthy() -> list[str] | None:
        svc = lb.service(namespace, name)
        if svc is None:
            return None
        got = list(svc["healthy"])
        ok = set(got) == want if isinstance(want, set) else len(got) == want
        return got if ok else None

    return poll_until(healthy, timeout=timeout, interval=0.1,
                      description=f"the LB's healthy set of {namespace}/{name} to be {want}")


def deploy_with_vip(ns: Applier, *tweaks: Tweak, healthy: set[str] | int = 3) -> str:
    """Backend and Service rolled out, VIP assigned, the LB's healthy set as wanted; the VIP."""
    deploy_backend(ns, *tweaks)
    assert ns.namespace
    vip = wait_for_vip(ns.api, ns.namespace)
    wait_for_healthy(ns.namespace, healthy)
    return vip


def remove_pinned_backend(ns: Applier, removal: str) -> tuple[list[Any], list[Any]]:
    """20 connections over three nodes (eTP Local); node-2's pod then terminates with a 20 s
    preStop (still serving, its node failing health checks) and leaves the healthy set; every
    connection sends one more request. Returns (connections pinned to that pod, the others)."""
    from lbconform.kube import tweaks
    from lbconform.traffic.fleet import Fleet

    vip = deploy_with_vip(ns, tweaks.one_per_node, tweaks.traffic_policy_local, tweaks.pre_stop_sleep(20),
                          tweaks.grace_period(40),
                          lab_lb(health_check_interval_seconds=1, backend_removal=removal))
    assert ns.namespace
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(20)
        victim = pods_by_node(ns.api, ns.namespace)["node-2"]["metadata"]["name"]
        ns.api.delete(f"/api/v1/namespaces/{ns.namespace}/pods/{victim}")
        wait_for_healthy(ns.namespace, 2)
        fleet.request()
        pinned = [c for c in fleet.connections if c.backends[0] == victim]
        assert pinned, "no connection reached node-2's pod"
        return pinned, [c for c in fleet.connections if c not in pinned]


#: How long the reference LB may take to run the passes after a change that a helper waits for.
RECONCILE_SECONDS = 10.0


def update_and_reconcile(ns: Applier, change: Tweak, passes: int = 2) -> None:
    """Change the Service ``backend``; return once the LB ran ``passes`` reconcile passes after it."""
    from lbconform.kube.jig import ServiceJig
    from lbconform.wait import poll_until
    from lbconform_lab.lb.client import LabLB

    lb = LabLB()

    def reconciles() -> int:
        state = lb.service(ns.namespace or "", "backend")
        assert state is not None
        return int(state["counters"]["reconciles"])

    before = reconciles()
    ServiceJig(ns).update(change)
    poll_until(lambda: reconciles() >= before + passes, timeout=RECONCILE_SECONDS,
               description="the LB to reconcile the change")


def change_port(ns: Applier, port: int) -> None:
    """The Service's first port becomes ``port``; returns once the LB reconciled the change."""
    from lbconform.kube import tweaks

    update_and_reconcile(ns, tweaks.set_port(port), passes=1)


def udp_from(vip: str, port: int, source_port: int = 0, message: bytes = b"hostname") -> str:
    """One datagram from the client (from ``source_port`` when given); the answer (OSError: none)."""
    import socket

    from lbconform.nsexec import run_in_netns

    def ask() -> str:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", source_port))
            s.settimeout(1)
            s.sendto(message, (vip, port))
            return s.recv(4096).decode().strip()

    return run_in_netns(topo.CLIENT_NS, ask)


def mac_of(netns: str, dev: str) -> str:
    return ns.ip(netns, "-o", "link", "show", dev).split("link/ether ")[1].split()[0]


def neighbour_mac(address: str) -> str:
    """The MAC the client's router has learnt by ARP for ``address`` ("" when it has none)."""
    out = ns.ip(topo.LB_NS, "neigh", "show", address)
    return out.split("lladdr ")[1].split()[0] if "lladdr " in out else ""


def answers_through(vip: str, node: topo.Node, timeout: float) -> None:
    """``vip`` answers the client within ``timeout``, and the client's router reaches it through
    ``node`` (by ARP)."""
    from lbconform.wait import poll_until

    status, body = poll_until(lambda: client_get(vip, 80, "/hostname"), timeout=timeout, interval=0.2,
                              retry_on=(OSError,), description=f"{vip} to answer the client")
    assert status == 200 and body.startswith("backend-")
    assert neighbour_mac(vip) == mac_of(node.netns, "eth0"), (
        f"the client's router reaches {vip} through another node than {node.name}, which announces it")


def kill_and_time_the_move(lab: Lab, vip: str, node: topo.Node, window: float, who: str) -> float:
    """Kill ``node``, which announces ``vip``: the address answers again through a surviving node
    within ``window``, ``who``'s declared failover. Returns how long that took."""
    from lbconform.wait import poll_until

    nodes = lab.dir.read().nodes
    lab.kill_node(node.name)
    killed = time.monotonic()
    poll_until(lambda: client_get(vip, 80, "/hostname", timeout=0.5)[0] == 200, timeout=2 * window,
               interval=0.1, retry_on=(OSError,), description=f"{vip} to answer again after {node.name} died")
    moved_after = time.monotonic() - killed
    survivors = {mac_of(n.netns, "eth0"): n.name for n in topo.nodes(nodes) if n != node}
    assert neighbour_mac(vip) in survivors, f"{vip} answers, but not through a surviving node"
    assert moved_after <= window, (f"{vip} answered again {moved_after:.1f}s after {node.name} died, "
                                   f"beyond {who}'s declared {window:g}s")
    return moved_after


def the_announcing_node(provider: Any, namespace: str, nodes: int, timeout: float) -> topo.Node:
    """The one node ``provider``'s pool names for the Service ``backend`` of ``namespace`` (the
    node that announces its address), once it names exactly one."""
    from lbconform.providers.base import ServiceRef
    from lbconform.wait import poll_until

    def announcer() -> str:
        pool = provider.backend_pool(ServiceRef(namespace, "backend"))
        return str(pool[0].name) if len(pool) == 1 else ""

    name = poll_until(announcer, timeout=timeout, interval=0.2,
                      description=f"the {provider.name} provider to name one node announcing the address")
    return topo.node_by_name(name, nodes)


def not_supported_with_reasons(profile: dict[str, Any]) -> set[str]:
    """The profile's not-supported tests, once the report has said why for each of them."""
    names = set(profile["tests"]["notSupported"])
    reasons = profile.get("reasons") or {}
    silent = sorted(t for t in names if not str(reasons.get(t, "")).removeprefix("not supported:").strip())
    assert not silent, f"not supported without a reason: {silent}"
    return names


def certification(doc: dict[str, Any], not_supported: set[str], chaos_passed: int, window: float) -> None:
    """A certification's report (core, extended and chaos): every test passes or is exactly one of
    ``not_supported`` (for a reason the implementation's model gives); chaos passes ``chaos_passed``
    tests; both node kills carry the failover time beside the declared ``window``."""
    profiles = {p["name"]: p for p in doc["profiles"]}
    assert set(profiles) == {"core", "extended", "chaos"}
    found = set()
    for profile in profiles.values():
        assert profile["statistics"]["failed"] == 0 and profile["statistics"]["skipped"] == 0, profile
        assert profile["statistics"]["errors"] == 0, profile
        found |= not_supported_with_reasons(profile)
    assert found == not_supported
    assert len(profiles["chaos"]["tests"]["passed"]) == chaos_passed
    failover = [m for m in doc["measurements"] if m["name"] == "node_kill_last_failure_after"]
    assert len(failover) == 2 and all(m["declared"] == window for m in failover), failover


@dataclass(frozen=True)
class Restarted:
    """What ``restart_the_lb_under_local_policy`` saw."""

    vip: str
    #: The healthy set before the restart and right after it.
    before: list[str]
    after: list[str]
    #: The Service's address after the restart.
    address: str | None
    #: Answers to 10 new connections right after the restart.
    answers: list[object]
    #: Outcomes of 20 connections opened before the restart, asked once after it.
    established: dict[str, int]


def restart_the_lb_under_local_policy(ns: Applier) -> Restarted:
    """Backends on two nodes (eTP Local, 3 checks of 2 s to turn healthy), 20 connections opened
    once they are healthy, then the reference LB restarted."""
    from lbconform.kube import tweaks
    from lbconform.kube.jig import ServiceJig
    from lbconform.traffic.fleet import Fleet
    from lbconform_lab.lb.client import LabLB

    deploy_backend(ns, tweaks.replicas(2), tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(health_check_interval_seconds=2, health_check_healthy_threshold=3))
    assert ns.namespace
    vip = wait_for_vip(ns.api, ns.namespace)
    before = sorted(wait_for_healthy(ns.namespace, 2))
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(20)
        Lab().restart_lb()
        state = LabLB().service(ns.namespace, "backend")
        after = sorted(state["healthy"]) if state else []
        answers: list[object] = []
        for _ in range(10):
            try:
                answers.append(client_get(vip, 80, "/hostname", timeout=1)[0])
            except OSError as exc:
                answers.append(type(exc).__name__)
        established = fleet.request()
    return Restarted(vip, before, after, ServiceJig(ns, "backend").ingress(), answers, established)


class LabSession:
    """Whether this session booted the lab, and so whether it must take it down."""

    def __init__(self) -> None:
        self.lab = Lab()
        # A lab a killed run left behind is no one's: it is removed, and this session boots its own.
        self.lab.replace_leftover()
        self.user_lab = self.lab.dir.exists()
        self.booted = False

    def ensure_up(self) -> Lab:
        if not self.lab.dir.exists():
            self.lab.up()
            self.booted = True
        return self.lab

    def ensure_down(self) -> None:
        if self.user_lab:
            pytest.skip("a lab started outside this test session is running; "
                        "lifecycle tests need the machine without one")
        if self.lab.dir.exists():
            self.lab.down()

    def close(self) -> None:
        if self.booted and not self.user_lab:
            self.lab.down()
