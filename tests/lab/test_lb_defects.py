"""Every defect of the reference LB changes the behaviour it names.

The tests in test_lb.py show the correct behaviour; each test here switches one defect on
through the LB's state API, for the Services of this session's tests only, and shows the
behaviour change, so that the conformance suites can later be checked against these defects.
So they go on beside the reference runs, which meet a correct LB (``beside_runs``), except those
marked ``alone``, which restart the LB or label a node. ``DEFECT_TESTS`` is the table of defect ->
test; ``test_every_defect_has_a_test`` keeps it complete.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lbconform.kube import objects, tweaks
from lbconform.kube.jig import CLEANUP_FINALIZER, ServiceJig
from lbconform.kube.manifests import Applier, load_one
from lbconform.kube.namespaces import TestNamespaces
from lbconform.kube.sweeper import add_label, restore_node
from lbconform.provisioning import INTERVAL, AddressWatch
from lbconform.target import EXCLUDE_LABEL
from lbconform.traffic.fleet import Fleet
from lbconform.traffic.in_cluster import deploy_pod_clients
from lbconform.wait import Deadline, await_convergence, poll_until
from lbconform_lab import topology as topo
from lbconform_lab.lb.client import LabLB
from lbconform_lab.lb.controller import MAX_PASS_SECONDS
from lbconform_lab.lb.params import DEFECTS, SERIAL_PROVISIONING_SECONDS, SLOW_REGISTRATION_SECONDS, Params
from lbconform_lab.lb.plan import KUBE_PROXY_HEALTH_PORT
from tests.lab.helpers import (
    change_port,
    client_get,
    deploy_backend,
    deploy_with_vip,
    lab_lb,
    pods_by_node,
    remove_pinned_backend,
    restart_the_lb_under_local_policy,
    udp_from,
    update_and_reconcile,
    wait_for_healthy,
    wait_for_node_ports,
    wait_for_vip,
)

pytestmark = [pytest.mark.lab, pytest.mark.beside_runs]

HC_INTERVAL, HC_UNHEALTHY = Params().hc_interval, Params().hc_unhealthy

#: defect -> (the test here that shows the defect, the test in test_lb.py or
#: test_lab_provider.py that the defect would fail: the correct behaviour it breaks; None where
#: only a conformance suite test shows it, in defect_rows.DEFECT_SUITES)
DEFECT_TESTS: dict[str, tuple[str, str | None]] = {
    "ignore-health": ("test_ignore_health_sends_to_nodes_without_endpoints",
                      "test_local_policy_keeps_client_ip_and_uses_only_nodes_with_endpoints"),
    "slow-unhealthy": ("test_slow_unhealthy_keeps_a_failed_node",
                       "test_node_leaves_the_healthy_set_after_interval_times_threshold"),
    "no-pinning": ("test_no_pinning_moves_flows_on_a_change",
                   "test_flows_idle_under_the_timeout_survive_a_change"),
    "reset-on-change": ("test_reset_on_change_resets_every_flow",
                        "test_flows_idle_under_the_timeout_survive_a_change"),
    "stale-pool": ("test_stale_pool_keeps_deleted_pods",
                   "test_pod_pool_follows_ready_endpoints_with_batching"),
    "node-ips-in-pod-pool": ("test_node_ips_in_pod_pool", "test_pool_is_nodes_or_ready_pods"),
    "snat-local": ("test_snat_local_hides_the_client",
                   "test_local_policy_keeps_client_ip_and_uses_only_nodes_with_endpoints"),
    "short-idle": ("test_short_idle_forgets_flows_early",
                   "test_flows_idle_under_the_timeout_survive_a_change"),
    "never-forget": ("test_never_forget_keeps_idled_out_flows_pinned",
                     "test_idle_flows_are_reset_when_the_healthy_set_changed"),
    "no-drain": ("test_no_drain_resets_pinned_flows", "test_drain_keeps_pinned_flows_of_a_removed_backend"),
    "ignore-source-ranges": ("test_ignore_source_ranges_lets_everyone_in",
                             "test_source_ranges_admit_and_deny"),
    "no-affinity": ("test_no_affinity_spreads_one_client", "test_client_ip_affinity_keeps_one_backend"),
    "drop-finalizer": ("test_drop_finalizer_provisions_without_it",
                       "test_type_change_and_delete_release_the_load_balancer"),
    "ignore-updates": ("test_ignore_updates_keeps_the_first_port", "test_port_change_moves_the_listener"),
    "udp-stale": ("test_udp_stale_keeps_a_flow_on_a_removed_pod", None),
    "wrong-idle-reset": ("test_wrong_idle_reset_resets_flows_not_asked_to",
                         "test_idle_flows_survive_when_the_healthy_set_is_unchanged"),
    "keep-deleted-vip": ("test_keep_deleted_vip_serves_a_deleted_service", None),
    "move-ip-on-update": ("test_move_ip_on_update_gives_a_new_address", None),
    "ignore-class": ("test_ignore_class_serves_a_foreign_class", None),
    "drop-udp-on-mixed": ("test_drop_udp_on_mixed_answers_tcp_only", None),
    "ignore-exclusion-label": ("test_ignore_exclusion_label_keeps_the_node", None),
    "ignore-requested-ip": ("test_ignore_requested_ip_gives_the_next_address", None),
    "sticky-affinity": ("test_sticky_affinity_keeps_one_client_on_one_backend", None),
    "sticky-source-ranges": ("test_sticky_source_ranges_keep_clients_out", None),
    "serial-provisioning": ("test_serial_provisioning_gives_addresses_a_second_apart", None),
    "cold-restart": ("test_cold_restart_forgets_the_healthy_backends",
                     "test_restart_keeps_health_and_address"),
    "rehash-on-restart": ("test_rehash_on_restart_moves_established_flows",
                          "test_restart_keeps_health_and_address"),
    "never-healthy-again": ("test_never_healthy_again_keeps_passing_nodes_out", None),
    "no-spread": ("test_no_spread_sends_every_flow_to_one_backend", None),
    "keep-finalizer-on-type-change": ("test_keep_finalizer_on_type_change_holds_the_service", None),
    "forget-a-node": ("test_forget_a_node_leaves_the_last_node_out", None),
    "require-node-ports": ("test_require_node_ports_serves_nothing_without_them", None),
    "ranges-drop-all": ("test_ranges_drop_all_keeps_a_listed_client_out", None),
    "no-hairpin": ("test_no_hairpin_leaves_a_pods_connection_unanswered", None),
    "wrong-ip-mode": ("test_wrong_ip_mode_says_vip_in_nodeport_mode", None),
    "stale-health-check": ("test_stale_health_check_keeps_checking_kube_proxy_under_local", None),
    "slow-registration": ("test_slow_registration_holds_a_new_pod_back", None),
    "no-reprovision": ("test_no_reprovision_leaves_a_service_back_to_load_balancer_without_address", None),
}


def test_every_defect_has_a_test() -> None:
    from tests.lab import test_lab_provider, test_lb
    from tests.lab.defect_rows import CHAOS_DEFECT_SUITES, DEFECT_SUITES

    assert set(DEFECT_TESTS) == set(DEFECTS)
    for defect, (shows, breaks) in DEFECT_TESTS.items():
        assert shows in globals(), shows
        if breaks is None:
            assert defect in DEFECT_SUITES or defect in CHAOS_DEFECT_SUITES, defect
        else:
            assert hasattr(test_lb, breaks) or hasattr(test_lab_provider, breaks), breaks


@pytest.fixture
def defect(request: pytest.FixtureRequest, lab: object, run_id: str) -> Iterator[str]:
    """The defect, switched on for the Services of this session's tests only (they carry its run
    id), so the reference runs going on beside meet the LB as it should be."""
    name = request.param
    lb = LabLB()
    before = lb.defects(run=run_id)
    lb.set_defects([name], run=run_id)
    try:
        yield name
    finally:
        lb.set_defects(before, run=run_id)


def with_defect(name: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("defect", [name], indirect=True)


def new_connection_results(vip: str, count: int = 20, path: str = "/hostname") -> list[str]:
    """``count`` new connections, one request each: the answer, or how it failed."""
    with Fleet(vip, 80, topo.CLIENT_NS, timeout=2) as fleet:
        fleet.open(count)
        return [c.backend if c.outcome == "alive" and c.backend else c.outcome for c in fleet.connections]


def _changed_while_pinned(ns: Applier, idle_timeout: int = 120, idle: float = 0) -> dict[str, int]:
    """20 connections, pinned for ``idle_timeout``; the healthy set grows; after ``idle`` seconds
    more, one request each."""
    api, namespace = ns.api, ns.namespace
    assert namespace
    deploy_backend(ns, tweaks.replicas(2), tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(idle_timeout_seconds=idle_timeout, health_check_interval_seconds=1))
    vip = wait_for_vip(api, namespace)
    wait_for_healthy(namespace, 2)
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(20)
        api.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/backend", {"spec": {"replicas": 3}})
        wait_for_healthy(namespace, 3)
        time.sleep(idle)
        return fleet.request()


@with_defect("ignore-health")
def test_ignore_health_sends_to_nodes_without_endpoints(defect: str, test_namespace: Applier) -> None:
    deploy_backend(test_namespace, tweaks.replicas(1), tweaks.traffic_policy_local,
                   lab_lb(health_check_interval_seconds=1))
    assert test_namespace.namespace
    vip = wait_for_vip(test_namespace.api, test_namespace.namespace)
    wait_for_healthy(test_namespace.namespace, 3)
    results = new_connection_results(vip)
    assert any(r in ("timeout", "reset", "refused") for r in results), results


@with_defect("slow-unhealthy")
def test_slow_unhealthy_keeps_a_failed_node(defect: str, test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    deploy_backend(test_namespace, tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(health_check_interval_seconds=1))
    wait_for_healthy(ns, 3)
    api.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/backend", {"spec": {"replicas": 2}})
    poll_until(lambda: len(pods_by_node(api, ns)) == 2, timeout=30, description="the scale-down")
    time.sleep(6)  # three times interval x threshold: a correct LB has removed the node by now
    state = LabLB().service(ns, "backend")
    assert state is not None and len(state["healthy"]) == 3
    assert sum(1 for b in state["pool"] if b["healthCheck"]["passing"] is False) == 1


@with_defect("no-pinning")
def test_no_pinning_moves_flows_on_a_change(defect: str, test_namespace: Applier) -> None:
    outcomes = _changed_while_pinned(test_namespace)
    assert outcomes.get("reset", 0) >= 1, outcomes


@with_defect("reset-on-change")
def test_reset_on_change_resets_every_flow(defect: str, test_namespace: Applier) -> None:
    outcomes = _changed_while_pinned(test_namespace)
    assert outcomes == {"reset": 20}, outcomes


def _pod_mode_scaled_down(ns: Applier) -> tuple[str, set[str], list[str]]:
    api, namespace = ns.api, ns.namespace
    assert namespace
    deploy_backend(ns, tweaks.one_per_node, lab_lb(mode="pod"))
    vip = wait_for_vip(api, namespace)
    wait_for_healthy(namespace, 3)
    api.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/backend", {"spec": {"replicas": 2}})
    poll_until(lambda: len(objects.pods(api, namespace, "app=backend")) == 2, timeout=30,
               description="the deleted pod to be gone")
    ready = {p["status"]["podIP"] for p in objects.pods(api, namespace, "app=backend")}
    time.sleep(1)
    state = LabLB().service(namespace, "backend")
    assert state is not None
    return vip, ready, [b["address"] for b in state["pool"]]


@with_defect("stale-pool")
def test_stale_pool_keeps_deleted_pods(defect: str, test_namespace: Applier) -> None:
    vip, ready, pool = _pod_mode_scaled_down(test_namespace)
    assert len(pool) == 3 and ready < set(pool)
    assert any(r in ("timeout", "reset", "refused") for r in new_connection_results(vip))


@with_defect("node-ips-in-pod-pool")
def test_node_ips_in_pod_pool(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.one_per_node, lab_lb(mode="pod"))
    assert test_namespace.namespace
    state = LabLB().service(test_namespace.namespace, "backend")
    assert state is not None
    assert {b["address"] for b in state["pool"]} == {n.ip for n in topo.nodes(3)}
    assert all(r == "refused" for r in new_connection_results(vip, 5))


@with_defect("snat-local")
def test_snat_local_hides_the_client(defect: str, test_namespace: Applier) -> None:
    deploy_backend(test_namespace, tweaks.one_per_node, tweaks.traffic_policy_local,
                   lab_lb(health_check_interval_seconds=1))
    assert test_namespace.namespace
    vip = wait_for_vip(test_namespace.api, test_namespace.namespace)
    wait_for_healthy(test_namespace.namespace, 3)
    status, body = client_get(vip, 80, "/clientip")
    assert status == 200 and body.rsplit(":", 1)[0] == topo.LB_FABRIC_IP


@with_defect("short-idle")
def test_short_idle_forgets_flows_early(defect: str, test_namespace: Applier) -> None:
    # Idle 7 s: past the defect's 5 s, far below the Service's 120 s.
    outcomes = _changed_while_pinned(test_namespace, idle_timeout=120, idle=7)
    assert outcomes.get("reset", 0) >= 1, outcomes


@with_defect("never-forget")
def test_never_forget_keeps_idled_out_flows_pinned(defect: str, test_namespace: Applier) -> None:
    # Idle 8 s after the change: far past the Service's 3 s, so a correct LB hashes the flows
    # again and resets those that move (test_lb's test_idle_flows_are_reset_when_the_healthy_set_changed).
    assert _changed_while_pinned(test_namespace, idle_timeout=3, idle=8) == {"alive": 20}


@with_defect("no-drain")
def test_no_drain_resets_pinned_flows(defect: str, test_namespace: Applier) -> None:
    pinned, _ = remove_pinned_backend(test_namespace, "drain")
    assert all(c.outcome == "reset" for c in pinned), [c.outcome for c in pinned]


@with_defect("ignore-source-ranges")
def test_ignore_source_ranges_lets_everyone_in(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.source_ranges("198.51.100.0/24"), lab_lb(mode="pod"))
    assert test_namespace.namespace
    assert client_get(vip, 80, "/hostname")[0] == 200


@with_defect("no-affinity")
def test_no_affinity_spreads_one_client(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.session_affinity_client_ip, lab_lb(mode="pod"))
    assert test_namespace.namespace
    assert len(set(new_connection_results(vip))) > 1


@with_defect("drop-finalizer")
def test_drop_finalizer_provisions_without_it(defect: str, test_namespace: Applier) -> None:
    deploy_with_vip(test_namespace, tweaks.replicas(1))
    svc = test_namespace.api.get(f"/api/v1/namespaces/{test_namespace.namespace}/services/backend")
    assert CLEANUP_FINALIZER not in (svc["metadata"].get("finalizers") or [])


@with_defect("ignore-updates")
def test_ignore_updates_keeps_the_first_port(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1))
    change_port(test_namespace, 8080)
    # What the LB programs, not what answers on port 80: in node mode the node's kube-proxy serves
    # the VIP on the Service's port, and stops serving port 80 once it has synced the change.
    state = LabLB().service(test_namespace.namespace or "", "backend")
    assert state is not None
    ports = {p["port"] for b in state["pool"] for p in b["ports"]}
    assert ports == {80}, state["pool"]
    with pytest.raises(OSError):
        client_get(vip, 8080, "/hostname", timeout=1)


@with_defect("udp-stale")
def test_udp_stale_keeps_a_flow_on_a_removed_pod(defect: str, test_namespace: Applier) -> None:
    api, ns = test_namespace.api, test_namespace.namespace
    assert ns
    vip = deploy_with_vip(test_namespace, tweaks.udp_port(8081), tweaks.replicas(1),
                          tweaks.node_selector("node-1"), lab_lb(mode="pod"), healthy=1)
    old = udp_from(vip, 8081, 40053)
    api.delete(f"/api/v1/namespaces/{ns}/pods/{old}")

    def replaced() -> str | None:
        pods = [p for p in objects.pods(api, ns, "app=backend") if p["metadata"]["name"] != old]
        ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                        for c in p.get("status", {}).get("conditions", []))]
        return str(ready[0]["status"]["podIP"]) if ready else None

    new_ip = poll_until(replaced, timeout=30, description="the replacement pod to be ready")
    wait_for_healthy(ns, {new_ip})
    for _ in range(3):
        with pytest.raises(OSError):
            udp_from(vip, 8081, 40053)


@with_defect("wrong-idle-reset")
def test_wrong_idle_reset_resets_flows_not_asked_to(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), lab_lb(mode="pod", idle_timeout_seconds=2),
                          healthy=1)
    with Fleet(vip, 80, topo.CLIENT_NS) as fleet:
        fleet.open(5)
        assert fleet.request() == {"alive": 5}
        time.sleep(4)  # twice the idle timeout: the flows idled out
        assert fleet.request() == {"reset": 5}


@with_defect("keep-deleted-vip")
def test_keep_deleted_vip_serves_a_deleted_service(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), lab_lb(mode="pod"), healthy=1)
    ServiceJig(test_namespace).delete_and_wait(timeout=10)
    assert vip in LabLB().deleted_but_kept().values()
    status, _ = client_get(vip, 80, "/hostname")
    assert status == 200


@with_defect("move-ip-on-update")
def test_move_ip_on_update_gives_a_new_address(defect: str, test_namespace: Applier) -> None:
    jig = ServiceJig(test_namespace)
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1))
    jig.update(tweaks.session_affinity_client_ip)
    def new_address() -> str | None:
        address = jig.ingress()
        return address if address not in (None, vip) else None

    # The defect's behaviour is the wait itself: a correct LB keeps the address and the wait runs out.
    moved = poll_until(new_address, timeout=10, description="the address to move")
    def serves() -> bool:
        try:
            return client_get(moved, 80, "/hostname")[0] == 200
        except OSError:
            return False

    await_convergence(serves, successes=3, timeout=15, description=f"the new address {moved} to serve")


@with_defect("ignore-class")
def test_ignore_class_serves_a_foreign_class(defect: str, test_namespace: Applier) -> None:
    deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.load_balancer_class("example.com/other"))


@with_defect("drop-udp-on-mixed")
def test_drop_udp_on_mixed_answers_tcp_only(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.udp_beside_tcp, lab_lb(mode="pod"),
                          healthy=1)
    assert client_get(vip, 80, "/hostname")[0] == 200
    with pytest.raises(OSError):
        udp_from(vip, 80)


@pytest.mark.alone
@with_defect("ignore-exclusion-label")
def test_ignore_exclusion_label_keeps_the_node(defect: str, test_namespace: Applier) -> None:
    add_label(test_namespace.api, "node-3", "lbdefects", EXCLUDE_LABEL)
    try:
        deploy_with_vip(test_namespace, tweaks.replicas(1), healthy=3)
    finally:
        restore_node(test_namespace.api, "node-3")


@with_defect("ignore-requested-ip")
def test_ignore_requested_ip_gives_the_next_address(defect: str, test_namespace: Applier) -> None:
    wanted = topo.request_range()[-1]
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.load_balancer_ip(wanted))
    assert vip != wanted and vip not in topo.request_range()


@with_defect("sticky-affinity")
def test_sticky_affinity_keeps_one_client_on_one_backend(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.one_per_node, tweaks.traffic_policy_local,
                          tweaks.session_affinity_client_ip)
    update_and_reconcile(test_namespace, tweaks.session_affinity_none)
    answers = new_connection_results(vip)
    assert len(set(answers)) == 1, answers


@with_defect("sticky-source-ranges")
def test_sticky_source_ranges_keep_clients_out(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.source_ranges("192.0.2.0/24"))
    update_and_reconcile(test_namespace, tweaks.no_source_ranges)
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)


def test_a_defect_of_one_run_meets_only_that_runs_services(lab: object, test_namespace: Applier) -> None:
    """The defect table's rows run side by side: a defect switched on for one run's Services leaves
    every other Service alone, and the lab-wide defects as they were."""
    other_run = uuid.uuid4().hex[:8]
    others = TestNamespaces(test_namespace.api, other_run, 60)
    other = others.create()
    lb = LabLB()
    lb.set_defects(["drop-finalizer"], run=other_run)
    try:
        assert lb.defects(run=other_run) == ["drop-finalizer"] and lb.defects() == []
        for ns in (test_namespace, other):
            deploy_with_vip(ns, tweaks.replicas(1))
        finalizers = {ns.namespace: ns.api.get(f"/api/v1/namespaces/{ns.namespace}/services/backend")[
            "metadata"].get("finalizers") or [] for ns in (test_namespace, other)}
        assert CLEANUP_FINALIZER in finalizers[test_namespace.namespace], finalizers
        assert CLEANUP_FINALIZER not in finalizers[other.namespace], finalizers
    finally:
        lb.set_defects([], run=other_run)
        others.release(other)
        others.wait_gone()
    assert lb.defects(run=other_run) == []


# Alone: it times the LB to the second through a list of Services, which a loaded apiserver answers late.
@pytest.mark.alone
@with_defect("serial-provisioning")
def test_serial_provisioning_gives_addresses_a_second_apart(defect: str, test_namespace: Applier) -> None:
    services = f"/api/v1/namespaces/{test_namespace.namespace}/services"
    names = [f"serial-{i}" for i in range(3)]
    with AddressWatch(lambda: test_namespace.api.get(services)["items"], names) as watch:
        for name in names:
            service = load_one("backend-service")
            service["metadata"]["name"] = name
            test_namespace.create(service)
            watch.created(name)
        got = watch.result(within=10)
    assert not got.missing()
    seen = sorted(got.seen.values())
    assert seen[-1] - seen[0] >= 2 * SERIAL_PROVISIONING_SECONDS - INTERVAL, got.times()


@pytest.mark.alone
@with_defect("cold-restart")
def test_cold_restart_forgets_the_healthy_backends(defect: str, test_namespace: Applier) -> None:
    r = restart_the_lb_under_local_policy(test_namespace)
    # Healthy again after 3 checks 2 s apart, the first at once: the first 3 connections (1 s each) fail.
    assert len(r.before) == 2 and r.after == [] and r.address == r.vip
    assert 200 not in r.answers[:3], r.answers


@pytest.mark.alone
@with_defect("rehash-on-restart")
def test_rehash_on_restart_moves_established_flows(defect: str, test_namespace: Applier) -> None:
    # Each of the 20 flows is hashed again over the two nodes with a new seed: about half move to
    # the other node, whose backend resets them; new connections are served as before.
    r = restart_the_lb_under_local_policy(test_namespace)
    assert r.after == r.before and r.answers == [200] * 10
    assert r.established.get("reset", 0) >= 1, r.established



@with_defect("never-healthy-again")
def test_never_healthy_again_keeps_passing_nodes_out(defect: str, test_namespace: Applier) -> None:
    """The two nodes without an endpoint are found unhealthy (two checks each); once they have an
    endpoint their checks pass, and still they stay out of the healthy set."""
    namespace = test_namespace.namespace
    assert namespace
    deploy_backend(test_namespace, tweaks.replicas(1), tweaks.one_per_node, tweaks.traffic_policy_local)
    wait_for_vip(test_namespace.api, namespace)
    lb = LabLB()

    def pool_if(holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The LB's state of the Service once its three nodes all meet ``holds``."""
        state = lb.service(namespace, "backend")
        pool = state["pool"] if state else []
        return state if len(pool) == 3 and all(holds(b) for b in pool) else None

    poll_until(lambda: pool_if(lambda b: b["healthCheck"]["checks"] >= 2), timeout=30,
               description="every node to be checked twice")
    test_namespace.api.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/backend",
                             {"spec": {"replicas": 3}})
    state = poll_until(lambda: pool_if(lambda b: b["healthCheck"]["passing"] is True), timeout=30,
                       description="every node's health check to pass")
    assert len(state["healthy"]) <= 1, state["healthy"]


@with_defect("no-spread")
def test_no_spread_sends_every_flow_to_one_backend(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, lab_lb(mode="pod"))
    answers = new_connection_results(vip)
    assert len(set(answers)) == 1, answers


@with_defect("keep-finalizer-on-type-change")
def test_keep_finalizer_on_type_change_holds_the_service(defect: str, test_namespace: Applier) -> None:
    """The apiserver clears the address of a Service that is no longer type LoadBalancer; the LB lets
    the Service go and leaves its finalizer."""
    deploy_with_vip(test_namespace, tweaks.replicas(1))
    ServiceJig(test_namespace).update(tweaks.service_type("ClusterIP"))
    lb = LabLB()
    poll_until(lambda: lb.service(test_namespace.namespace or "", "backend") is None, timeout=10,
               description="the LB to let the Service go")
    jig = ServiceJig(test_namespace)
    deadline = Deadline.after(2 * MAX_PASS_SECONDS)  # passes after the one that let it go
    while not deadline.expired():
        assert CLEANUP_FINALIZER in jig.finalizers()
        time.sleep(0.1)


@with_defect("forget-a-node")
def test_forget_a_node_leaves_the_last_node_out(defect: str, test_namespace: Applier) -> None:
    deploy_with_vip(test_namespace, tweaks.replicas(1), healthy=2)
    state = LabLB().service(test_namespace.namespace or "", "backend")
    assert state is not None and sorted(b["name"] for b in state["pool"]) == ["node-1", "node-2"]


@with_defect("require-node-ports")
def test_require_node_ports_serves_nothing_without_them(defect: str, test_namespace: Applier) -> None:
    assert test_namespace.namespace
    deploy_backend(test_namespace, tweaks.replicas(1), tweaks.no_node_ports)
    vip = wait_for_vip(test_namespace.api, test_namespace.namespace)
    lb = LabLB()
    state = poll_until(lambda: lb.service(test_namespace.namespace or "", "backend"), timeout=10,
                       description="the LB's state of the Service")
    assert state["pool"] == []
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)


@with_defect("ranges-drop-all")
def test_ranges_drop_all_keeps_a_listed_client_out(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.source_ranges(f"{topo.CLIENT_IP}/32"))
    with pytest.raises(OSError):
        client_get(vip, 80, "/hostname", timeout=1)


@with_defect("no-hairpin")
def test_no_hairpin_leaves_a_pods_connection_unanswered(defect: str, test_namespace: Applier) -> None:
    """The outside client is answered; a pod, whose flow the LB forwards without taking it over,
    is not (the backend's reply goes to the pod directly, from an address it never dialled)."""
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), lab_lb(mode="nodeport"), healthy=3)
    # Healthy by kube-proxy's /healthz before each kube-proxy forwards the node port (refused once
    # beside the reference runs, in the fresh-clone run of a655e0b).
    wait_for_node_ports(test_namespace.api.get(f"/api/v1/namespaces/{test_namespace.namespace}/services/backend"))
    assert client_get(vip, 80, "/hostname")[0] == 200
    [pod] = deploy_pod_clients(test_namespace, 1, timeout=30)
    assert pod.source_seen(vip, 80) is None


@with_defect("wrong-ip-mode")
def test_wrong_ip_mode_says_vip_in_nodeport_mode(defect: str, test_namespace: Applier) -> None:
    vip = deploy_with_vip(test_namespace, tweaks.replicas(1), lab_lb(mode="nodeport"))
    svc = test_namespace.api.get(f"/api/v1/namespaces/{test_namespace.namespace}/services/backend")
    assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": vip, "ipMode": "VIP"}]


@with_defect("stale-health-check")
def test_stale_health_check_keeps_checking_kube_proxy_under_local(defect: str,
                                                                  test_namespace: Applier) -> None:
    """Provisioned under Cluster (every node healthy by kube-proxy's /healthz), the Service turns Local:
    the LB goes on checking /healthz, so the two nodes without an endpoint stay healthy, where the
    Service's healthCheckNodePort would fail them."""
    namespace = test_namespace.namespace or ""
    deploy_with_vip(test_namespace, tweaks.replicas(1), tweaks.one_per_node)
    update_and_reconcile(test_namespace, tweaks.traffic_policy_local)
    time.sleep(2 * HC_INTERVAL * HC_UNHEALTHY)  # long past the checks that fail them when right
    state = LabLB().service(namespace, "backend")
    assert state is not None
    targets = {b["healthCheck"]["target"].rsplit(":", 1)[1] for b in state["pool"]}
    assert targets == {f"{KUBE_PROXY_HEALTH_PORT}/healthz"} and len(state["healthy"]) == 3, state


@with_defect("slow-registration")
def test_slow_registration_holds_a_new_pod_back(defect: str, test_namespace: Applier) -> None:
    """Pod mode: a pod that joins the provisioned Service's pool gets no flow for
    ``SLOW_REGISTRATION_SECONDS``; the pods of its first pool were not held back."""
    namespace = test_namespace.namespace or ""
    deploy_with_vip(test_namespace, tweaks.replicas(1), lab_lb(mode="pod"), healthy=1)
    test_namespace.api.patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/backend",
                             {"spec": {"replicas": 2}})
    lb = LabLB()

    def pool_of_two() -> bool:
        state = lb.service(namespace, "backend")
        return state is not None and len(state["pool"]) == 2

    poll_until(pool_of_two, timeout=60, interval=0.1, description="the new pod to join the pool")
    joined = time.monotonic()
    wait_for_healthy(namespace, 2, timeout=SLOW_REGISTRATION_SECONDS + 10)
    assert time.monotonic() - joined >= SLOW_REGISTRATION_SECONDS - 2 * MAX_PASS_SECONDS


@with_defect("no-reprovision")
def test_no_reprovision_leaves_a_service_back_to_load_balancer_without_address(
        defect: str, test_namespace: Applier) -> None:
    """A Service changed to ClusterIP and back to LoadBalancer gets no address and no LB state."""
    namespace = test_namespace.namespace or ""
    deploy_with_vip(test_namespace, tweaks.replicas(1))
    jig = ServiceJig(test_namespace)
    jig.update(tweaks.service_type("ClusterIP"))
    lb = LabLB()
    poll_until(lambda: lb.service(namespace, "backend") is None, timeout=10,
               description="the LB to let the Service go")
    jig.update(tweaks.service_type("LoadBalancer"))
    deadline = Deadline.after(10 * MAX_PASS_SECONDS)  # a right LB gives the address on its next pass
    while not deadline.expired():
        assert jig.ingress() is None and lb.service(namespace, "backend") is None
        time.sleep(0.1)
