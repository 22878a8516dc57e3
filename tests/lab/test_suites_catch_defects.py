"""Every applicable defect of the reference LB makes a named conformance test fail, and the
report names the failing feature: the table below is checked row by row, through ``lbconform run``
against the running lab with the defect switched on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lbconform.features import Feature
from lbconform.lab.cluster import Lab
from lbconform.lab.lb.client import LabLB
from lbconform.lab.lb.params import DEFECTS
from tests.lab.test_run import lbconform_run

pytestmark = pytest.mark.lab

IDLE_BELOW = "test_idle_and_keepalive::test_flows_idle_below_the_timeout_survive_a_change"
IDLE_UNCHANGED = "test_idle_and_keepalive::test_flows_idle_beyond_the_timeout_survive_without_a_change"
IDLE_RESET = "test_idle_and_keepalive::test_idled_out_flows_reset_when_asked"
LIFECYCLE = Feature.LOAD_BALANCER_LIFECYCLE
IN_FLIGHT = "test_graceful_termination::test_in_flight_requests_finish_during_pre_stop"
KEEPALIVE = "test_idle_and_keepalive::test_keepalive_shorter_than_idle_survives_changes"
UDP = "test_udp::test_udp_flow_follows_a_replaced_server"

#: defect -> (the lab mode the suite runs in, the suite tests that must fail, the feature the report
#: must list as failed).
DEFECT_SUITES: dict[str, tuple[str, tuple[str, ...], Feature]] = {
    "ignore-health": ("node", ("test_traffic_policy_local::test_only_nodes_with_local_endpoint_get_traffic",
                               "test_health_checks::test_only_terminating_endpoints_fail_the_health_check"),
                      Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL),
    "slow-unhealthy": ("node", ("test_health_checks::test_unhealthy_after_last_local_endpoint_gone",
                                "test_graceful_termination::test_rolling_update_fails_no_request[Local-daemonset]"),
                       Feature.HEALTH_CHECK_TRANSITIONS),
    "stale-pool": ("pod", ("test_backend_pool::test_pod_pool_follows_scale_down",), Feature.POD_BACKEND_POOL),
    "node-ips-in-pod-pool": ("pod", ("test_backend_pool::test_pod_pool_equals_ready_pod_ips",),
                             Feature.POD_BACKEND_POOL),
    "snat-local": ("node", ("test_traffic_policy_local::test_client_source_ip_preserved",),
                   Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL),
    "ignore-source-ranges": ("pod", ("test_source_ranges::test_source_range_denies_unlisted_client",),
                             Feature.SOURCE_RANGES),
    "no-affinity": ("node", ("test_session_affinity::test_client_ip_affinity_keeps_one_backend",),
                    Feature.SESSION_AFFINITY),
    "short-idle": ("node", (IDLE_BELOW, "test_idle_and_keepalive::test_idle_timeout_measured"),
                   Feature.IDLE_TIMEOUT),
    "no-pinning": ("node", (IDLE_BELOW, IN_FLIGHT, KEEPALIVE), Feature.IDLE_TIMEOUT),
    "reset-on-change": ("node", (IDLE_BELOW, IN_FLIGHT, KEEPALIVE), Feature.GRACEFUL_TERMINATION),
    "no-drain": ("node", (IN_FLIGHT,), Feature.GRACEFUL_TERMINATION),
    "wrong-idle-reset": ("node", (IDLE_UNCHANGED, IDLE_RESET), Feature.IDLE_TIMEOUT),
    "drop-finalizer": ("node", ("test_lifecycle::test_cleanup_finalizer_while_provisioned",), LIFECYCLE),
    "ignore-updates": ("node", ("test_lifecycle::test_port_change",), LIFECYCLE),
    "udp-stale": ("pod", (f"{UDP}[same-node]", f"{UDP}[another-node]"), Feature.UDP),
}


def test_every_defect_is_in_the_table() -> None:
    assert set(DEFECT_SUITES) == set(DEFECTS)


def keyword(test: str) -> str:
    """A ``-k`` expression for one suite test name, ``module::name[param-ids]``."""
    name, _, params = test.split("::")[1].partition("[")
    return "(" + " and ".join([name, *params.rstrip("]").split("-")]) + ")" if params else name


@pytest.fixture
def defect(request: pytest.FixtureRequest, lab: Lab) -> Iterator[str]:
    lb = LabLB()
    before = lb.defects()
    lb.set_defects([request.param])
    try:
        yield request.param
    finally:
        lb.set_defects(before)


@pytest.mark.parametrize("defect", sorted(DEFECT_SUITES), indirect=True)
def test_suite_catches_defect(defect: str, tmp_path: Path) -> None:
    mode, tests, feature = DEFECT_SUITES[defect]
    names = " or ".join(keyword(t) for t in tests)
    result = lbconform_run("--profile", "core", "--profile", "extended", "--mode", mode, "-n", "1",
                           "--", "-k", names, report_dir=tmp_path)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    doc = yaml.safe_load((tmp_path / "conformance-report.yaml").read_text())
    failed = {t for p in doc["profiles"] for t in p["tests"]["failed"]}
    failing_features = {f for p in doc["profiles"] for f in p["features"]["failed"]}
    assert failed == set(tests), result.stdout[-4000:]
    assert feature.value in failing_features


NODE_KILL = "chaos/test_node_failure::test_killed_node_fails_requests_only_until_detected"
#: defect -> the chaos suite tests that must fail (over their failure budget and detection window).
CHAOS_DEFECT_SUITES: dict[str, tuple[str, ...]] = {
    "ignore-health": (f"{NODE_KILL}[Cluster]", f"{NODE_KILL}[Local]"),
    "slow-unhealthy": (f"{NODE_KILL}[Cluster]", f"{NODE_KILL}[Local]"),
}


@pytest.mark.parametrize("defect", sorted(CHAOS_DEFECT_SUITES), indirect=True)
def test_chaos_suite_catches_defect(defect: str, tmp_path: Path) -> None:
    result = lbconform_run("--profile", "chaos", "--allow-disruptive", "--mode", "node", "-n", "1",
                           "--", "-k", "test_killed_node", report_dir=tmp_path)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    doc = yaml.safe_load((tmp_path / "conformance-report.yaml").read_text())
    failed = {t for p in doc["profiles"] for t in p["tests"]["failed"]}
    assert failed == set(CHAOS_DEFECT_SUITES[defect]), result.stdout[-4000:]
    assert "over budget" in result.stdout or "deviated=True" in result.stdout, result.stdout[-4000:]
