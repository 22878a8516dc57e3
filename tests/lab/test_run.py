"""``lbconform run`` against the lab: the core and extended profiles pass on the reference LB in
every mode, the report validates, and a run boots and removes a lab only when none is running.
The three modes' runs start together with the defect rows on the first test that asks
(``reference_runs`` in ``tests/lab/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lbconform.report import schema
from lbconform_lab.cluster import Lab
from tests.lab.defect_rows import PROXY_PATH, VIP_PATH
from tests.lab.helpers import not_supported_with_reasons
from tests.lab.runs import ReferenceRuns, lbconform_cli, lbconform_run, outcome

pytestmark = pytest.mark.lab

#: Tests that report *not supported* in a mode, because what they check does not exist there:
#: node health checks and node pools (and the orderings and idle flows that rest on them) in
#: pod mode (node exclusion too), a VIP without node ports in nodeport mode; a pod's path to an
#: ipMode Proxy address outside nodeport mode, and to an ipMode VIP address in it.
NOT_SUPPORTED_IN_MODE = {
    "node": {PROXY_PATH},
    "nodeport": {"test_lifecycle::test_without_node_ports",
                 "test_lifecycle::test_node_ports_turned_on_keep_the_address", VIP_PATH},
    "pod": {PROXY_PATH,"test_backend_pool::test_cluster_policy_pool_is_every_node",
            "test_node_exclusion::test_excluded_node_takes_no_new_flows",
            "test_backend_pool::test_local_policy_pool_sends_to_nodes_with_endpoints",
            "test_health_checks::test_healthy_after_new_local_endpoint_ready",
            "test_health_checks::test_node_to_be_deleted_leaves_cluster_policy_pool",
            "test_health_checks::test_only_terminating_endpoints_fail_the_health_check",
            "test_health_checks::test_unhealthy_after_last_local_endpoint_gone",
            "test_graceful_termination::test_in_flight_requests_finish_during_pre_stop",
            *(f"test_graceful_termination::test_ordering_violation_fails_requests[{v}]"
              for v in ("g-below-p", "no-prestop", "p-below-u")),
            *(f"test_idle_and_keepalive::{t}" for t in (
                "test_flows_idle_below_the_timeout_survive_a_change",
                "test_flows_idle_beyond_the_timeout_move_after_a_change",
                "test_flows_idle_beyond_the_timeout_survive_without_a_change",
                "test_idle_timeout_measured", "test_idled_out_flows_reset_when_asked",
                "test_keepalive_shorter_than_idle_survives_changes"))},
}

def report(report_dir: Path) -> dict[str, object]:
    doc: dict[str, object] = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    return doc


@pytest.mark.parametrize("mode", sorted(NOT_SUPPORTED_IN_MODE))
def test_core_and_extended_pass_on_the_reference_lb(lab: Lab, reference_runs: ReferenceRuns,
                                                    mode: str) -> None:
    result, tmp_path = reference_runs.modes.result(mode)
    assert result.returncode == 0, outcome(result)
    doc = report(tmp_path)
    assert schema.validate(doc) == [] and schema.check_statistics(doc) == []
    profiles = {p["name"]: p for p in doc["profiles"]}  # type: ignore[attr-defined]
    assert set(profiles) == {"core", "extended"}
    not_supported = set()
    for p in profiles.values():
        assert p["statistics"]["failed"] == 0 and p["statistics"]["skipped"] == 0, p
        not_supported |= not_supported_with_reasons(p)
    assert not_supported == NOT_SUPPORTED_IN_MODE[mode]
    assert doc["target"] == {"kind": "lab", "kubernetesVersion": "v1.36.3",  # type: ignore[comparison-overlap]
                             "nodes": ["node-1", "node-2", "node-3"], "provider": "lab", "mode": mode}
    assert (tmp_path / "junit.xml").is_file() and (tmp_path / "datasheet.md").is_file()
    assert (tmp_path / "allure-results" / "environment.properties").is_file()
    # A measurement of every mode, and node health checks' only where the pool holds nodes: a
    # not-supported test that recorded one anyway would show up here.
    sheet = (tmp_path / "datasheet.md").read_text()
    assert "| lb_provisioning |" in sheet, sheet
    assert ("| time_to_unhealthy |" in sheet) is (mode != "pod"), sheet
    summary = (tmp_path / "summary.md").read_text()
    assert all(f"| {name} | **{p['result']}** |" in summary for name, p in profiles.items()), summary
    assert lab.dir.exists(), "a run must leave a lab it did not boot running"
    verify = lbconform_cli("report", "verify", str(tmp_path / "conformance-report.yaml"))
    assert verify.returncode == 0 and "a valid conformance report" in verify.stdout, verify.stderr
    if mode == "node":  # the lab run's reports become the HTML report people browse
        html = lbconform_cli("report", "--report-dir", str(tmp_path), "--html", "--single-file")
        assert html.returncode == 0, html.stdout + html.stderr
        assert (tmp_path / "html" / "index.html").is_file()
        assert (tmp_path / "html-single" / "index.html").stat().st_size > 100_000


@pytest.mark.lab_lifecycle
def test_run_boots_a_lab_and_removes_it(no_lab: Lab, tmp_path: Path) -> None:
    result = lbconform_run("-n", "1", "--", "-k", "test_ingress_assigned_and_reachable", report_dir=tmp_path)
    assert result.returncode == 0, outcome(result)
    assert "lab booted" in result.stderr and "lab removed" in result.stderr
    assert not no_lab.dir.exists()
    assert report(tmp_path)["profiles"][0]["statistics"]["passed"] == 1  # type: ignore[index]


def test_run_with_nothing_selected_says_so(lab: Lab, tmp_path: Path) -> None:
    result = lbconform_run("-n", "1", "--", "-k", "no_such_test", report_dir=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "lbconform: error: no test was selected: check --profile, --features and any -k expression")
