"""The reference load balancer does what a correct cloud LB does, in each backend mode.

These tests go on beside the reference runs (``beside_runs``, tests/lab/conftest.py), except those
marked ``alone``: a restart of the LB, and the two that time it to the second."""

from __future__ import annotations

import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.jig import CLEANUP_FINALIZER
from lbconform.kube.manifests import Applier, load_one
from lbconform.kube.namespaces import TestNamespaces
from lbconform.kube.rawapi import ApiError
from lbconform.kube.workload import QUIET_KIND
from lbconform.nsexec import in_netns
from lbconform.traffic.fleet import Fleet, KeepAlive
from lbconform.wait import NotYet, poll_until
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab
from lbconform_lab.lb.client import LabLB
from lbconform_lab.probe import http_status
from tests.lab.helpers import (
    Stopwatch,
    change_port,
    client_get,
    deploy_backend,
    deploy_with_vip,
    lab_lb,
    pods_by_node,
    remove_pinned_backend,
    restart_the_lb_under_local_policy,
    udp_from,
    wait_for_healthy,
    wait_for_node_ports,
    wait_for_vip,
    wait_until_gone,
)

pytestmark = [pytest.mark.lab, pytest.mark.beside_runs]

MODES = ("node", "nodeport", "pod")


@pytest.mark.alone
@pytest.mark.parametrize("mode", MODES)
def test_vip_within_two_seconds_and_every_endpoint_served(test_namespace: Applier, mode: str) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    test_namespace.create(load_one("backend-deployment", tweaks.one_per_node))
    objects.wait_for_deployment(api, ns, "backend")
    clock = Stopwatch()
    test_namespace.create(load_one("backend-service", lab_lb(mode=mode, health_check_interval_seconds=1)))
    vip = wait_for_vip(api, ns)
    assert clock() <= 2.0, f"VIP after {clock():.2f}s"
    names = {p["metadata"]["name"] for p in pods_by_node(api, ns).values()}
    seen: set[str] = set()

    def all_served() -> bool:
        status, body = client_get(vip, 80, "/hostname")
        if status == 200:
            seen.add(body)
        return seen == names

    poll_until(all_served, timeout=20, interval=0.02, description=f"every backend behind {vip}")
    state = LabLB().service(ns, "backend")
    assert state is not None and state["vip"] == vip and state["mode"] == mode


def test_type_change_and_delete_release_the_load_balancer(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    _, svc = deploy_backend(test_namespace)
    path = f"/api/v1/namespaces/{ns}/services/backend"
    vip = wait_for_vip(api, ns)
    assert CLEANUP_FINALIZER in api.get(path)["metadata"]["finalizers"]

    api.patch(path, {"spec": {"type": "ClusterIP", "externalTrafficPolicy": None}})

    def released() -> bool:
        s = api.get(path)
        return (not s.get("status", {}).get("loadBalancer", {}).get("ingress")
                and CLEANUP_FINALIZER not in (s["metadata"].get("finalizers") or [])
                and LabLB().service(ns, "backend") is None)

    poll_until(released, timeout=10, description="the LB to release a Service turned ClusterIP")
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)

    api.patch(path, {"spec": {"type": "LoadBalancer"}})
    vip = wait_for_vip(api, ns)
    api.delete(path)
    wait_until_gone(api, path, "the Service to be deleted once its finalizer is gone")
    assert LabLB().service(ns, "backend") is None
    del svc


def test_port_change_moves_the_listener(test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1))
    change_port(test_namespace, 8080)
    poll_until(lambda: client_get(vip, 8080, "/hostname")[0] == 200, timeout=10, retry_on=(OSError,),
               description="the new port to serve")
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)


#: Client ports above the ephemeral range (32768-60999), so no other connection of the client uses
#: them; drawn anew each time, so a run's ports are not in TIME_WAIT from the last one's.
STALE_PORT_RANGE = range(61000, 65536)


#: How long the inserted stale entry lives: conntrack's own TIME_WAIT, longer than the test.
STALE_ENTRY_SECONDS = 120


def _server_opened_entry(vip: str, port: int) -> None:
    """The entry a server's packet leaves when the LB had forgotten its flow: from the VIP's port
    80 to the client's ``port``, never answered."""
    subprocess.run(in_netns(topo.LB_NS, [
        "conntrack", "-I", "-p", "tcp", "-s", vip, "-d", topo.CLIENT_IP, "--sport", "80",
        "--dport", str(port), "-r", topo.CLIENT_IP, "-q", vip, "--reply-port-src", str(port),
        "--reply-port-dst", "80",
        "--state", "ESTABLISHED", "--timeout", str(STALE_ENTRY_SECONDS)]), capture_output=True, check=True)


def test_stale_flows_of_the_address_block_no_new_connection(test_namespace: Applier) -> None:
    """A server's packet for a flow the LB forgot (a keepalive probe after the idle timeout, a FIN
    after a release) leaves a conntrack entry that starts at the VIP. A new connection from that
    flow's client port meets it in its reply direction, where conntrack takes its SYN for invalid:
    the LB still routes it to a node, and it is served (the VIP may have had another Service
    before: the allocator reuses addresses)."""
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1))
    # The SYN goes to whichever node its port hashes to: each must have the Service's endpoint
    # (kube-proxy refuses until then; the LB's healthy set does not wait for it).
    wait_for_node_ports(test_namespace.api.get(f"/api/v1/namespaces/{test_namespace.namespace}/services/backend"))
    for port in random.sample(STALE_PORT_RANGE, 2):
        _server_opened_entry(vip, port)
        status, _ = http_status(topo.CLIENT_NS, vip, 80, "/hostname", source_port=port)
        assert status == 200, f"a connection from port {port} over a stale entry"


def test_allocate_node_ports_false(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.no_node_ports, lab_lb(mode="pod"))
    vip = wait_for_vip(api, ns)
    assert "nodePort" not in api.get(f"/api/v1/namespaces/{ns}/services/backend")["spec"]["ports"][0]
    poll_until(lambda: client_get(vip, 80, "/hostname")[0] == 200, timeout=15,
               description="pod mode to serve without node ports", retry_on=(OSError,))
    api.patch(f"/api/v1/namespaces/{ns}/services/backend",
              {"metadata": {"annotations": {"lab.lbconform.io/mode": "nodeport"}}})

    def event() -> bool:
        items = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return any(e["reason"] == "UnsupportedConfiguration" for e in items)

    poll_until(event, timeout=10, description="an event saying nodeport mode cannot work")


def _fleet_scenario(ns: Applier, idle_timeout: int, change: bool, idle: float,
                    keepalive: KeepAlive | None = None, kind: str = "deployment") -> dict[str, int]:
    """20 connections, an optional healthy-set change while idle, then one request each."""
    api, namespace = ns.api, ns.namespace
    assert namespace
    deploy_backend(ns, tweaks.replicas(2), tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(idle_timeout_seconds=idle_timeout, health_check_interval_seconds=1), kind=kind)
    vip = wait_for_vip(api, namespace)
    wait_for_healthy(namespace, 2)
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(20, keepalive)
        assert fleet.outcomes() == {"alive": 20}
        clock = Stopwatch()
        if change:
            api.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/backend", {"spec": {"replicas": 3}})
            wait_for_healthy(namespace, 3)
        time.sleep(max(0.0, idle - clock()))
        before = {c.index: c.backend for c in fleet.connections}
        outcomes = fleet.request()
        moved = [c for c in fleet.connections if c.outcome == "alive" and c.backends[-1] != before[c.index]]
        assert not moved, "a live connection changed backend"
        return outcomes


def test_idle_flows_survive_when_the_healthy_set_is_unchanged(test_namespace: Applier) -> None:
    assert _fleet_scenario(test_namespace, idle_timeout=3, change=False, idle=5) == {"alive": 20}


def test_idle_flows_are_reset_when_the_healthy_set_changed(test_namespace: Applier) -> None:
    outcomes = _fleet_scenario(test_namespace, idle_timeout=3, change=True, idle=8)
    assert outcomes.get("reset", 0) >= 1, outcomes


def test_flows_idle_under_the_timeout_survive_a_change(test_namespace: Applier) -> None:
    assert _fleet_scenario(test_namespace, idle_timeout=60, change=True, idle=8) == {"alive": 20}


def test_only_the_quiet_backend_lets_a_timeout_past_15_seconds_expire(
        lab: Lab, lab_namespaces: TestNamespaces) -> None:
    """Why the idle suites use the quiet backend: agnhost probes every connection idle 15 s (Go's
    TCP keepalive), which keeps the LB's entry of a 16 s timeout fresh, so flows idle 20 s across a
    change all survive; behind the quiet backend the entry expires and the moved flows are reset.
    The two side by side, each in a namespace of its own."""
    namespaces = [lab_namespaces.create() for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            agnhost, quiet = pool.map(
                lambda ns, kind: _fleet_scenario(ns, idle_timeout=16, change=True, idle=20, kind=kind),
                namespaces, ("deployment", QUIET_KIND))
    finally:
        for ns in namespaces:
            lab_namespaces.release(ns)
    assert agnhost == {"alive": 20}
    assert quiet.get("reset", 0) >= 1, quiet


def test_keepalive_shorter_than_the_timeout_survives_a_change(test_namespace: Applier) -> None:
    outcomes = _fleet_scenario(test_namespace, idle_timeout=3, change=True, idle=8,
                               keepalive=KeepAlive(idle=1, interval=1))
    assert outcomes == {"alive": 20}


def test_local_policy_keeps_client_ip_and_uses_only_nodes_with_endpoints(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.replicas(2), tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(health_check_interval_seconds=1))
    vip = wait_for_vip(api, ns)
    with_pods = set(pods_by_node(api, ns))
    wait_for_healthy(ns, with_pods)
    for _ in range(20):
        status, body = client_get(vip, 80, "/clientip")
        assert status == 200
        assert body.rsplit(":", 1)[0] == topo.CLIENT_IP


def test_backend_pool_object_is_the_state_apis_pool(test_namespace: Applier) -> None:
    """Each Service's BackendPool object, in its namespace and owned by it, holds the pool and
    healthy set the state API serves, and is gone once the Service is."""
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    _, svc = deploy_backend(test_namespace, tweaks.replicas(1), tweaks.traffic_policy_local,
                            lab_lb(health_check_interval_seconds=1))
    wait_for_vip(api, ns)
    (with_pod,) = pods_by_node(api, ns)
    wait_for_healthy(ns, {with_pod})
    path = f"/apis/lab.lbconform.io/v1alpha1/namespaces/{ns}/backendpools/backend"
    lb = LabLB()

    def published_as_served() -> tuple[dict[str, Any], dict[str, Any]] | NotYet:
        state, obj = lb.service(ns, "backend"), api.get(path)
        assert state is not None
        served = [{k: b[k] for k in ("name", "address", "healthy")} for b in state["pool"]]
        if obj.get("status", {}).get("members") != served:
            return NotYet(f"object {obj.get('status')}, state API {served}")
        return state, obj

    state, obj = poll_until(published_as_served, timeout=10, interval=0.2, retry_on=(ApiError,),
                            description="the BackendPool object to say the state API's pool")
    members = {m["name"]: m["healthy"] for m in obj["status"]["members"]}
    assert members == {n.name: n.name == with_pod for n in topo.nodes(3)}
    assert obj["status"]["service"] == f"{ns}/backend" and obj["status"]["mode"] == state["mode"]
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Service", "name": "backend", "uid": svc["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": False}]

    api.delete(f"/api/v1/namespaces/{ns}/services/backend")
    wait_until_gone(api, path, "the BackendPool object to go with its Service")


@pytest.mark.alone
def test_node_leaves_the_healthy_set_after_interval_times_threshold(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    interval, threshold = 1.0, 3
    _, svc = deploy_backend(
        test_namespace, tweaks.one_per_node, tweaks.traffic_policy_local, tweaks.pre_stop_sleep(15),
        tweaks.grace_period(30),
        lab_lb(health_check_interval_seconds=interval, health_check_unhealthy_threshold=threshold))
    wait_for_healthy(ns, 3)
    node = topo.node_by_name("node-2", 3)
    victim = pods_by_node(api, ns)[node.name]
    api.delete(f"/api/v1/namespaces/{ns}/pods/{victim['metadata']['name']}")
    # Time from the moment kube-proxy's health check on the node starts failing.
    hc = int(svc["spec"]["healthCheckNodePort"])
    poll_until(lambda: client_get(node.ip, hc, "/healthz")[0] == 503, timeout=10, interval=0.02,
               description=f"{node.name}'s health check to fail")
    failing_since = time.time()
    wait_for_healthy(ns, {"node-1", "node-3"}, timeout=20)
    state = LabLB().service(ns, "backend")
    assert state is not None
    changed = next(b["lastChange"] for b in state["pool"] if b["name"] == node.name)
    took = changed - failing_since
    expected = interval * threshold
    assert expected - interval <= took <= expected + interval, f"left after {took:.2f}s, expected {expected}s"


@pytest.mark.parametrize("mode", MODES)
def test_udp_port_is_served(test_namespace: Applier, mode: str) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.udp_port(8081), lab_lb(mode=mode, health_check_interval_seconds=1))
    vip = wait_for_vip(api, ns)
    wait_for_healthy(ns, 3)
    names = {p["metadata"]["name"] for p in pods_by_node(api, ns).values()}
    answer = poll_until(lambda: udp_from(vip, 8081), timeout=10, retry_on=(OSError,),
                        description=f"a UDP answer from {vip}:8081")
    assert answer in names


@pytest.mark.parametrize("mode", MODES)
def test_source_ranges_admit_and_deny(test_namespace: Applier, mode: str) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.source_ranges("198.51.100.0/24"), lab_lb(mode=mode))
    vip = wait_for_vip(api, ns)
    wait_for_healthy(ns, 3)
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)
    api.patch(f"/api/v1/namespaces/{ns}/services/backend",
              {"spec": {"loadBalancerSourceRanges": ["198.51.100.0/24", "203.0.113.0/24"]}})
    poll_until(lambda: client_get(vip, 80, "/hostname")[0] == 200, timeout=10, retry_on=(OSError,),
               description="the client to be admitted once its range is listed")


@pytest.mark.parametrize("mode", MODES)
def test_client_ip_affinity_keeps_one_backend(test_namespace: Applier, mode: str) -> None:
    from tests.lab.test_lb_defects import new_connection_results

    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    _, service = deploy_backend(test_namespace, tweaks.one_per_node, tweaks.session_affinity_client_ip,
                                lab_lb(mode=mode))
    vip = wait_for_vip(api, ns)
    wait_for_healthy(ns, 3)
    # Pinned to one node, the client would see only refusals while that node's kube-proxy lacks
    # the endpoints (seen once, in a fresh-clone run of e2c5288).
    wait_for_node_ports(service)
    results = new_connection_results(vip)
    assert len(set(results)) == 1 and results[0] not in ("timeout", "reset", "refused"), results


def test_switching_traffic_policy_changes_health_checks(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.replicas(1), lab_lb(health_check_interval_seconds=1))
    path = f"/api/v1/namespaces/{ns}/services/backend"
    for policy, healthy in (("Cluster", 3), ("Local", 1), ("Cluster", 3), ("Local", 1)):
        api.patch(path, {"spec": {"externalTrafficPolicy": policy}})
        wait_for_healthy(ns, healthy)
        state = LabLB().service(ns, "backend")
        assert state is not None
        hc = api.get(path)["spec"].get("healthCheckNodePort")
        port = str(hc) if policy == "Local" else "10256"
        assert all(f":{port}/" in b["healthCheck"]["target"] for b in state["pool"]), state["pool"]
        vip = wait_for_vip(api, ns)
        poll_until(partial(client_get, vip, 80, "/hostname"), timeout=10, retry_on=(OSError,),
                   description=f"traffic with externalTrafficPolicy={policy}")


def test_tcp_reset_option_resets_idled_flows(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.replicas(1),
                   lab_lb(mode="pod", idle_timeout_seconds=2, tcp_reset="true"))
    vip = wait_for_vip(api, ns)
    wait_for_healthy(ns, 1)
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(5)
        assert fleet.request() == {"alive": 5}
        time.sleep(4)
        assert fleet.request() == {"reset": 5}


def test_backend_removal_reset_forgets_pinned_flows(test_namespace: Applier) -> None:
    pinned, others = remove_pinned_backend(test_namespace, "reset")
    assert all(c.outcome == "reset" for c in pinned), [c.outcome for c in pinned]
    assert all(c.outcome == "alive" for c in others)


def test_drain_keeps_pinned_flows_of_a_removed_backend(test_namespace: Applier) -> None:
    pinned, others = remove_pinned_backend(test_namespace, "drain")
    assert all(c.outcome == "alive" for c in pinned + others)


def test_pod_pool_follows_ready_endpoints_with_batching(test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    delay = 3.0
    deploy_backend(test_namespace, tweaks.one_per_node, lab_lb(mode="pod", pool_update_delay_seconds=delay))
    wait_for_vip(api, ns)
    wait_for_healthy(ns, 3, timeout=15)
    ready = {p["status"]["podIP"] for p in objects.pods(api, ns, "app=backend")}
    state = LabLB().service(ns, "backend")
    assert state is not None and {b["address"] for b in state["pool"]} == ready
    api.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/backend", {"spec": {"replicas": 2}})
    clock = Stopwatch()
    wait_for_healthy(ns, 2, timeout=15)
    assert clock() >= delay - 0.5, f"pool changed after {clock():.2f}s, before the {delay}s batch delay"


@pytest.mark.parametrize(("protocol", "path", "healthy"), [
    ("http", "/readyz", 3), ("http", "/echo?code=503", 0), ("tcp", "/", 3)])
def test_pod_mode_health_checks(test_namespace: Applier, protocol: str, path: str, healthy: int) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.one_per_node, lab_lb(
        mode="pod", health_check_protocol=protocol, health_check_path=path,
        health_check_interval_seconds=0.5))
    wait_for_vip(api, ns)

    def checked_enough() -> dict | None:  # type: ignore[type-arg]
        # Four checks each: past the threshold of two whichever way they go.
        lb = LabLB().service(ns, "backend")
        done = lb is not None and len(lb["pool"]) == 3 and all(
            b["healthCheck"]["checks"] >= 4 for b in lb["pool"])
        return lb if done else None

    lb = poll_until(checked_enough, timeout=15, description="four health checks of every pod")
    assert len(lb["healthy"]) == healthy, lb["pool"]


@pytest.mark.alone
def test_restart_keeps_health_and_address(test_namespace: Applier) -> None:
    """A restarted LB starts from the health it saved: the healthy set and the address are the
    old ones from its first pass, new connections are served at once, and connections established
    before keep their backends."""
    r = restart_the_lb_under_local_policy(test_namespace)
    assert r.after == r.before and r.address == r.vip
    assert r.answers == [200] * 10
    assert r.established == {"alive": 20}

