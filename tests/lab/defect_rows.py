"""The defect rows: which suite tests each defect of the reference LB must fail, in which lab mode,
and which feature the report must then list as failed; and how a row's run starts.

A row is an ``lbconform run`` of its own, with its own run id, and its defect is switched on for
that run's Services only (the reference LB scopes defects by the ``lbconform.io/run`` label), so
rows go on side by side, and beside the mode runs of ``test_run.py`` (``tests/lab/conftest.py``).
``test_suites_catch_defects.py`` checks each row's report; ``test_every_defect_is_in_the_table``
keeps the table complete."""

from __future__ import annotations

import importlib
import math
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from lbconform.features import Feature
from lbconform_lab.lb.client import LabLB
from tests.lab.runs import CHECKOUT, HARNESS_ALONE, Result, lbconform_run

IDLE_BELOW = "test_idle_and_keepalive::test_flows_idle_below_the_timeout_survive_a_change"
IDLE_UNCHANGED = "test_idle_and_keepalive::test_flows_idle_beyond_the_timeout_survive_without_a_change"
IDLE_RESET = "test_idle_and_keepalive::test_idled_out_flows_reset_when_asked"
IDLE_MOVED = "test_idle_and_keepalive::test_flows_idle_beyond_the_timeout_move_after_a_change"
IDLE_MEASURED = "test_idle_and_keepalive::test_idle_timeout_measured"
LIFECYCLE = Feature.LOAD_BALANCER_LIFECYCLE
IN_FLIGHT = "test_graceful_termination::test_in_flight_requests_finish_during_pre_stop"
KEEPALIVE = "test_idle_and_keepalive::test_keepalive_shorter_than_idle_survives_changes"
UDP = "test_udp::test_udp_flow_follows_a_replaced_server"
IN_CLUSTER_RANGES = "test_in_cluster_clients::test_source_ranges_admit_and_deny_pods_as_listed"
ROLLOUT = "test_graceful_termination::test_rolling_update_fails_no_request"
TO_CLUSTER_IP = "test_lifecycle::test_type_change_to_cluster_ip_and_back"
VIP_PATH = "test_in_cluster_clients::test_pod_reaches_a_vip_address_directly_with_its_own_address"
PROXY_PATH = "test_in_cluster_clients::test_pod_traffic_to_a_proxy_address_crosses_the_load_balancer"

#: defect -> (the lab mode the suite runs in, the suite tests that must fail, the feature the report
#: must list as failed).
DEFECT_SUITES: dict[str, tuple[str, tuple[str, ...], Feature]] = {
    "ignore-health": ("node", ("test_traffic_policy_local::test_only_nodes_with_local_endpoint_get_traffic",
                               "test_health_checks::test_only_terminating_endpoints_fail_the_health_check",
                               "test_health_checks::test_node_to_be_deleted_leaves_cluster_policy_pool",
                               "test_backend_pool::test_local_policy_pool_sends_to_nodes_with_endpoints"),
                      Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL),
    "slow-unhealthy": ("node", ("test_health_checks::test_unhealthy_after_last_local_endpoint_gone",
                                "test_graceful_termination::test_rolling_update_fails_no_request[Local-daemonset]"),
                       Feature.HEALTH_CHECK_TRANSITIONS),
    # A rolling update in pod mode leans on the LB's pool: a terminating pod must leave it.
    "stale-pool": ("pod", ("test_backend_pool::test_pod_pool_follows_scale_down",
                           *(f"{ROLLOUT}[{policy}-{kind}]" for policy in ("Cluster", "Local")
                             for kind in ("deployment", "daemonset"))), Feature.POD_BACKEND_POOL),
    "node-ips-in-pod-pool": ("pod", ("test_backend_pool::test_pod_pool_equals_ready_pod_ips",),
                             Feature.POD_BACKEND_POOL),
    "snat-local": ("node", ("test_traffic_policy_local::test_client_source_ip_preserved",),
                   Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL),
    # nodeport mode: the LB alone enforces the ranges there, for pods too (ipMode Proxy); in node and
    # pod modes kube-proxy enforces them for pods, and in node mode for everyone.
    "ignore-source-ranges": ("nodeport", ("test_source_ranges::test_source_range_denies_unlisted_client",
                                          IN_CLUSTER_RANGES), Feature.SOURCE_RANGES),
    # Local only: under Cluster, kube-proxy's ClientIP affinity on every node picked one backend by
    # chance in one CI rehearsal (1 in 9 with three backends), hiding the LB's spreading.
    "no-affinity": ("node", ("test_session_affinity::test_client_ip_affinity_keeps_one_backend[Local]",
                             "test_session_affinity::test_affinity_switched_on_and_off"),
                    Feature.SESSION_AFFINITY),
    "sticky-affinity": ("node", ("test_session_affinity::test_affinity_switched_on_and_off",),
                        Feature.SESSION_AFFINITY),
    "sticky-source-ranges": ("node", ("test_source_ranges::test_cleared_source_ranges_admit_everyone",),
                             Feature.SOURCE_RANGES),
    "short-idle": ("node", (IDLE_BELOW, IDLE_MEASURED), Feature.IDLE_TIMEOUT),
    # The other three idle tests: flows the LB never forgets are never hashed again, never reset at
    # idle timeout, and live past the bracket's high end.
    "never-forget": ("node", (IDLE_RESET, IDLE_MOVED, IDLE_MEASURED), Feature.IDLE_TIMEOUT),
    "no-pinning": ("node", (IDLE_BELOW, IN_FLIGHT, KEEPALIVE), Feature.IDLE_TIMEOUT),
    "reset-on-change": ("node", (IDLE_BELOW, IN_FLIGHT, KEEPALIVE), Feature.GRACEFUL_TERMINATION),
    "no-drain": ("node", (IN_FLIGHT,), Feature.GRACEFUL_TERMINATION),
    "wrong-idle-reset": ("node", (IDLE_UNCHANGED, IDLE_RESET), Feature.IDLE_TIMEOUT),
    "drop-finalizer": ("node", ("test_lifecycle::test_cleanup_finalizer_while_provisioned", TO_CLUSTER_IP),
                       LIFECYCLE),
    "ignore-updates": ("node", ("test_lifecycle::test_port_change",
                                "test_mixed_protocol::test_several_ports_each_answer_and_follow_changes"),
                       LIFECYCLE),
    "udp-stale": ("pod", (f"{UDP}[same-node]", f"{UDP}[another-node]"), Feature.UDP),
    # pod mode: in node mode the VIP reaches the nodes, whose kube-proxies forget a deleted
    # Service's address by themselves.
    "keep-deleted-vip": ("pod", ("test_lifecycle::test_delete_deprovisions",), LIFECYCLE),
    "move-ip-on-update": ("node", ("test_lifecycle::test_address_kept_across_changes",
                                   "test_lifecycle::test_node_ports_turned_on_keep_the_address",
                                   "test_service_mutation::test_type_and_port_walk[TCP]"), LIFECYCLE),
    "ignore-class": ("node", ("test_load_balancer_class::test_service_of_a_foreign_class_gets_no_address",),
                     Feature.LOAD_BALANCER_CLASS),
    "drop-udp-on-mixed": ("node", ("test_mixed_protocol::test_tcp_and_udp_on_one_port",),
                          Feature.MIXED_PROTOCOL),
    "ignore-requested-ip": ("node", ("test_requested_address::test_requested_address_is_assigned",
                                     "test_requested_address::test_unavailable_address_is_refused_with_an_event"),
                            Feature.REQUESTED_ADDRESS),
    "ignore-exclusion-label": ("node", ("test_node_exclusion::test_excluded_node_takes_no_new_flows",),
                               Feature.NODE_EXCLUSION),
    "serial-provisioning": ("node", ("test_provisioning_at_scale::"
                                     "test_services_created_at_once_each_get_an_address_and_serve",),
                            Feature.PROVISIONING_AT_SCALE),
    "never-healthy-again": ("node", ("test_health_checks::test_healthy_after_new_local_endpoint_ready",),
                            Feature.HEALTH_CHECK_TRANSITIONS),
    # pod mode: in node mode kube-proxy on the one node spreads over every endpoint itself.
    "no-spread": ("pod", ("test_traffic_policy_cluster::test_every_endpoint_reachable",
                          "test_traffic_policy_cluster::test_traffic_spreads_over_endpoints"),
                  Feature.EXTERNAL_TRAFFIC_POLICY_CLUSTER),
    "keep-finalizer-on-type-change": ("node", (TO_CLUSTER_IP,), LIFECYCLE),
    "forget-a-node": ("node", ("test_backend_pool::test_cluster_policy_pool_is_every_node",),
                      Feature.BACKEND_POOL),
    "require-node-ports": ("node", ("test_lifecycle::test_without_node_ports",), LIFECYCLE),
    "ranges-drop-all": ("node", ("test_source_ranges::test_source_range_admits_listed_client",),
                        Feature.SOURCE_RANGES),
    "no-hairpin": ("nodeport", (PROXY_PATH,), Feature.IN_CLUSTER_CLIENTS),
    "wrong-ip-mode": ("pod", (VIP_PATH,), Feature.IN_CLUSTER_CLIENTS),
    "stale-health-check": ("node", ("test_traffic_policy_local::test_switching_policy_back_and_forth",),
                           Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL),
    "slow-registration": ("pod", ("test_backend_pool::test_pod_pool_follows_scale_up",
                                  "test_backend_pool::test_pod_pool_follows_a_burst_of_changes"),
                          Feature.POD_BACKEND_POOL),
    "no-reprovision": ("node", (TO_CLUSTER_IP,), LIFECYCLE),
}

NODE_KILL = "chaos/test_node_failure::test_killed_node_fails_requests_only_until_detected"
LB_RESTART = "chaos/test_lb_restart::test_restart_under_load_fails_no_request[controller]"
#: How a chaos test's failure shows in its output: the experiment's traffic over its failure
#: budget (or its hypothesis deviated), or the connections established before a restart.
EXPERIMENT_FAILED = ("over budget", "deviated=True")
ESTABLISHED_RESET = ("connections established before the restart, after it",)
#: defect -> (the chaos suite tests that must fail, what their output must show: any of these).
CHAOS_DEFECT_SUITES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ignore-health": ((f"{NODE_KILL}[Cluster]", f"{NODE_KILL}[Local]"), EXPERIMENT_FAILED),
    "slow-unhealthy": ((f"{NODE_KILL}[Cluster]", f"{NODE_KILL}[Local]"), EXPERIMENT_FAILED),
    "cold-restart": ((LB_RESTART,), EXPERIMENT_FAILED),
    # New connections go on as before; the flows the new process hashes elsewhere are reset.
    "rehash-on-restart": ((LB_RESTART,), ESTABLISHED_RESET),
}


def keyword(test: str) -> str:
    """A ``-k`` expression for one suite test name, ``module::name[param-ids]``."""
    name, _, params = test.split("::")[1].partition("[")
    return "(" + " and ".join([name, *params.rstrip("]").split("-")]) + ")" if params else name


#: Rows whose runs go on at the same time (each a test process against the shared lab). Most of a
#: row's time is spent waiting on the LB's timers (idle timeouts, health checks, rollouts): with
#: four, the lab's two cores were about half busy and the rows ended 100 s after the node run;
#: with five, the rows' queue still ended last, 73 s after the last mode run. The rows without an
#: exclusive test hold their places while they wait for the others' (``ExclusivesFirst``).
PARALLEL_ROWS = 6
IDLE_SUITE = "test_idle_and_keepalive::"


def _marks(test: str) -> list[Any]:
    """The marks of a suite test (``module::name[params]``): its module's and its own."""
    module_name, _, name = test.partition("::")
    module = importlib.import_module("suites." + module_name.replace("/", "."))
    marks = getattr(module, "pytestmark", [])
    return [*(marks if isinstance(marks, list) else [marks]),
            *getattr(getattr(module, name.partition("[")[0]), "pytestmark", [])]


def is_exclusive(test: str) -> bool:
    """Whether the suite test (``module::name[params]``) is marked ``exclusive``."""
    return any(m.name == "exclusive" for m in _marks(test))


def exclusive_tests(folder: str = "") -> Counter[str]:
    """The suite tests marked ``exclusive`` (core and extended's, or those of a ``folder`` of
    suites such as ``chaos``), as ``module::name``, each with its number of parametrizations."""
    found: Counter[str] = Counter()
    prefix = f"{folder}/" if folder else ""
    for path in sorted((CHECKOUT / "suites" / folder).glob("test_*.py")):
        module = importlib.import_module("suites." + (f"{folder}." if folder else "") + path.stem)
        for name in vars(module):
            test = f"{prefix}{path.stem}::{name}"
            if name.startswith("test_") and is_exclusive(test):
                found[f"{path.stem}::{name}"] = math.prod(len(m.args[1]) for m in _marks(test)
                                                          if m.name == "parametrize")
    return found


def exclusive_among(tests: tuple[str, ...], folder: str = "") -> Counter[str]:
    """The ``exclusive`` tests among ``tests`` (``[folder/]module::name[params]``, a name without
    params meaning every parametrization), as ``module::name`` with their number."""
    every = exclusive_tests(folder)
    found: Counter[str] = Counter()
    for test in tests:
        base = test.partition("[")[0].rpartition("/")[2]
        if base in every:
            found[base] += 1 if "[" in test else every[base]
    return found


def row_exclusive_tests(defect: str) -> Counter[str]:
    """The ``exclusive`` tests of a row, as ``module::name`` with their number."""
    return exclusive_among(DEFECT_SUITES[defect][1])


def chaos_row_exclusive_tests(defect: str) -> Counter[str]:
    """The ``exclusive`` tests of a chaos row, as ``module::name`` with their number."""
    return exclusive_among(CHAOS_DEFECT_SUITES[defect][0], "chaos")


def row_weight(defect: str) -> tuple[bool, int]:
    """Which rows start first: those with an ``exclusive`` test (it waits for every test holding
    the lab, which at the start are the runs' first ones and later may be idle probes a minute or
    two long, and holds all of them back meanwhile), then the longest, roughly: a test each, one
    more for each idle timeout a test waits out (two for the keepalive test), since one process
    runs a row's tests one by one."""
    tests = DEFECT_SUITES[defect][1]
    timeouts = sum(2 if t == KEEPALIVE else 1 for t in tests if t.startswith(IDLE_SUITE))
    return any(is_exclusive(t) for t in tests), len(tests) + timeouts


def run_with_defect(defect: str, report_dir: Path, *args: str) -> Result:
    """``lbconform run ARGS`` with ``defect`` switched on for this run's Services only."""
    run_id = uuid.uuid4().hex[:10]
    lb = LabLB()
    lb.set_defects([defect], run=run_id)
    try:
        return lbconform_run("--run-id", run_id, *args, report_dir=report_dir)
    finally:
        lb.set_defects([], run=run_id)


def run_chaos_row(defect: str, report_dir: Path) -> Result:
    """The chaos suite tests of a chaos row, with its defect (node mode, one test process)."""
    tests, _ = CHAOS_DEFECT_SUITES[defect]
    return run_with_defect(defect, report_dir, "--profile", "chaos", "--allow-disruptive", "--mode", "node",
                           "-n", "1", "--", "-k", " or ".join(sorted({keyword(t) for t in tests})))


def run_row(defect: str, report_dir: Path) -> Result:
    mode, tests, _ = DEFECT_SUITES[defect]
    return run_with_defect(defect, report_dir, "--profile", "core", "--profile", "extended", "--mode", mode,
                           "-n", "1", "--", "-k", " or ".join(keyword(t) for t in tests))


#: The rows that also run from the harness alone, through the reference LB's declaration file: its
#: health checks and pools, which the generic provider reads from the objects the LB publishes.
DECLARED_ROWS = ("ignore-health",)


def run_declared_row(defect: str, report_dir: Path) -> tuple[Result, Result]:
    """A row's run from the harness alone through the declaration (which declares the reference LB in
    its node mode), with its defect switched on for that run's Services only; with what importing the
    lab there does."""
    mode, tests, _ = DEFECT_SUITES[defect]
    assert mode == "node", f"{defect}: the declaration declares the reference LB in node mode"
    run_id = uuid.uuid4().hex[:10]
    lb = LabLB()
    lb.set_defects([defect], run=run_id)
    try:
        run = HARNESS_ALONE.run(report_dir, "reference-lb.yaml", "--run-id", run_id, "--profile", "core",
                                "--profile", "extended", "-n", "1", "--", "-k",
                                " or ".join(keyword(t) for t in tests))
    finally:
        lb.set_defects([], run=run_id)
    return HARNESS_ALONE.imports_the_lab(report_dir.parent), run
