"""The reference LB's pure decisions: which Services it serves, which nodes its pools may hold and
the rules of a mixed-protocol Service, with and without the defects that break them."""

from __future__ import annotations

from typing import Any

from lbconform_lab.lb import nft, plan
from lbconform_lab.lb.controller import ServiceState, wants_lb
from lbconform_lab.lb.params import LB_CLASS, NEVER_FORGET_SECONDS, SHORT_IDLE_SECONDS, Params, ip_mode
from lbconform_lab.lb.status import published_ip_mode

NODES = [plan.NodeInfo("node-1", "198.19.0.11", 1), plan.NodeInfo("node-2", "198.19.0.12", 2)]


def service(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "backend"},
            "spec": {"type": "LoadBalancer", "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "udp", "port": 80, "protocol": "UDP"}], **spec}}


def rules(defects: frozenset[str]) -> dict[str, tuple[int, ...]]:
    svc = service()
    params = Params()
    backends = list(plan.pool(svc, [], NODES, params, defects).values())
    p = plan.plan(svc, 1, "198.18.0.1", params, backends, defects)
    return {r.protocol: r.marks for r in p.rules}


def test_both_protocols_of_one_port_go_to_the_nodes() -> None:
    assert rules(frozenset()) == {"TCP": (0x101, 0x102), "UDP": (0x101, 0x102)}


def test_drop_udp_on_mixed_leaves_the_udp_port_without_backends() -> None:
    assert rules(frozenset({"drop-udp-on-mixed"})) == {"TCP": (0x101, 0x102), "UDP": ()}
    svc = service()
    p = plan.plan(svc, 1, "198.18.0.1", Params(), [], frozenset({"drop-udp-on-mixed"}))
    assert "ip daddr 198.18.0.1 udp dport 80 drop" in nft.render([p], set())


def test_a_syn_conntrack_refuses_is_routed_by_the_same_hash_in_node_mode() -> None:
    """A TCP SYN that meets a stale entry in its reply direction has no entry to carry a mark: it is
    marked by the hash that marks a new flow, before that rule; UDP has no such packet."""
    svc = service()
    backends = list(plan.pool(svc, [], NODES, Params(), frozenset()).values())
    lines = [line.strip() for line in nft.render([plan.plan(svc, 1, "198.18.0.1", Params(), backends,
                                                            frozenset())], set()).splitlines()]
    invalid = [i for i, line in enumerate(lines) if "ct state invalid" in line]
    assert len(invalid) == 1
    line = lines[invalid[0]]
    assert line.startswith("ip daddr 198.18.0.1 tcp dport 80 tcp flags & (syn | ack) == syn")
    pick = "jhash ip saddr . tcp sport mod 2 seed 0x9e3779b1 map { 0 : 0x101, 1 : 0x102 }"
    assert line.endswith(f"meta mark set {pick}")
    assert lines[invalid[0] + 1] == f"ip daddr 198.18.0.1 tcp dport 80 ct mark 0 ct mark set {pick}"


def test_the_lb_serves_its_class_and_no_other() -> None:
    assert wants_lb(service())
    assert wants_lb(service(loadBalancerClass=LB_CLASS))
    assert not wants_lb(service(loadBalancerClass="example.com/other"))
    assert wants_lb(service(loadBalancerClass="example.com/other"), frozenset({"ignore-class"}))
    assert not wants_lb(service(type="ClusterIP"), frozenset({"ignore-class"}))


def test_excluded_nodes_are_in_no_pool_unless_the_defect_ignores_the_label() -> None:
    nodes = plan.node_infos([
        {"metadata": {"name": f"node-{i}", "labels": {plan.EXCLUDE_LABEL: ""} if i == 2 else {}},
         "status": {"addresses": [{"type": "InternalIP", "address": f"198.19.0.1{i}"}]}} for i in (1, 2)])
    assert [n.name for n in nodes] == ["node-1", "node-2"]  # both routed
    assert [n.name for n in plan.eligible(nodes, frozenset())] == ["node-1"]
    ignoring = plan.eligible(nodes, frozenset({"ignore-exclusion-label"}))
    assert [n.name for n in ignoring] == ["node-1", "node-2"]


def test_sticky_defects_keep_what_the_previous_plan_had() -> None:
    before = plan.plan(service(sessionAffinity="ClientIP", loadBalancerSourceRanges=["192.0.2.0/24"]), 1,
                       "198.18.0.1", Params(), [], frozenset())
    cleared = service(sessionAffinity="None")
    correct = plan.plan(cleared, 1, "198.18.0.1", Params(), [], frozenset(), before)
    assert (correct.affinity, correct.source_ranges) == (False, ())
    defects = frozenset({"sticky-affinity", "sticky-source-ranges"})
    sticky = plan.plan(cleared, 1, "198.18.0.1", Params(), [], defects, before)
    assert (sticky.affinity, sticky.source_ranges) == (True, ("192.0.2.0/24",))


HAIRPIN = "ct original ip daddr 198.18.0.1 ip saddr { 100.64.0.0/16, 198.19.0.0/24 } masquerade"


def masquerades(mode: str, defects: frozenset[str] = frozenset()) -> bool:
    p = plan.plan(service(), 1, "198.18.0.1", Params(mode=mode), [], defects)
    return HAIRPIN in nft.render([p], set())


def test_flows_from_inside_the_cluster_take_the_lb_address_in_the_nat_modes() -> None:
    assert masquerades("nodeport") and masquerades("pod")
    assert not masquerades("node")  # the VIP reaches the nodes unchanged, kube-proxy serves pods
    assert not masquerades("nodeport", frozenset({"no-hairpin"}))


def test_the_ingress_says_proxy_where_the_lb_rewrites_the_destination() -> None:
    assert [ip_mode(m) for m in ("node", "nodeport", "pod")] == ["VIP", "Proxy", "VIP"]
    for mode, published in (("node", "VIP"), ("nodeport", "VIP"), ("pod", "Proxy")):
        state = ServiceState(key="ns/backend", uid="u", vip="198.18.0.1", index=1, params=Params(mode=mode),
                             defects=frozenset({"wrong-ip-mode"}))
        assert published_ip_mode(state) == published, mode


def test_no_spread_sends_every_flow_to_the_first_healthy_backend() -> None:
    svc = service()
    backends = list(plan.pool(svc, [], NODES, Params(), frozenset()).values())
    assert rules(frozenset({"no-spread"})) == {"TCP": (0x101,), "UDP": (0x101,)}
    pod = plan.plan(svc, 1, "198.18.0.1", Params(mode="nodeport"), backends, frozenset({"no-spread"}))
    assert len(pod.rules[0].targets) == 1


def test_forget_a_node_leaves_the_last_node_out() -> None:
    assert [n.name for n in plan.eligible(NODES, frozenset({"forget-a-node"}))] == ["node-1"]


def test_ranges_drop_all_admits_nobody_once_ranges_are_set() -> None:
    listed = service(loadBalancerSourceRanges=["203.0.113.10/32"])
    dropping = plan.plan(listed, 1, "198.18.0.1", Params(), [], frozenset({"ranges-drop-all"}))
    assert dropping.source_ranges == (plan.ADMITS_NOBODY,)
    unlisted = plan.plan(service(), 1, "198.18.0.1", Params(), [], frozenset({"ranges-drop-all"}))
    assert unlisted.source_ranges == ()


def test_the_idle_timeout_is_the_services_unless_a_defect_changes_it() -> None:
    svc = service()

    def idle(defects: frozenset[str]) -> int:
        ruleset = nft.render([plan.plan(svc, 1, "198.18.0.1", Params(idle_timeout=60), [], defects)], set())
        return {int(n.split("_")[1]) for n in ruleset.split() if n.startswith('"idle_')}.pop()

    assert idle(frozenset()) == 60
    assert idle(frozenset({"short-idle"})) == SHORT_IDLE_SECONDS
    assert idle(frozenset({"never-forget"})) == NEVER_FORGET_SECONDS


def test_only_rehash_on_restart_lets_a_process_hash_otherwise() -> None:
    def seed(defects: frozenset[str], salt: int) -> int:
        return plan.plan(service(), 1, "198.18.0.1", Params(), [], defects, salt=salt).seed

    assert seed(frozenset(), 1) == seed(frozenset(), 2)
    assert seed(frozenset({"rehash-on-restart"}), 1) != seed(frozenset({"rehash-on-restart"}), 2)


def test_a_backend_is_found_unhealthy_only_after_threshold_failures_in_a_row() -> None:
    from lbconform_lab.lb.health import Checker
    from lbconform_lab.lb.plan import HealthTarget

    checker = Checker("n", HealthTarget("http", "198.19.0.11", 10256), Params(), changed=lambda: None)
    for ok in (False, True, False):  # one failure at a time is not a verdict
        checker.record(ok, "")
    assert not checker.state.found_unhealthy
    checker.record(False, "")
    assert checker.state.found_unhealthy
    for _ in range(2):
        checker.record(True, "")
    assert checker.state.healthy and checker.state.found_unhealthy
