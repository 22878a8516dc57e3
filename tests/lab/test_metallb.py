"""MetalLB in the lab: a load balancer this project did not write, as upstream ships it.

``lab up --lb metallb`` boots the lab without the reference LB, applies MetalLB's own manifest
and hands it the VIP range in layer-2 mode. MetalLB is certified there twice on one lab, through
its provider and, as a user with no Python would, through its declaration file; the client's
router finds a VIP by ARP, the announcing speaker answers, and when that node dies memberlist
moves the VIP to another node. Bad input is refused in one line before anything is made.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from lbconform.kube.manifests import Applier
from lbconform.kube.tweaks import one_per_node
from lbconform.providers.metallb import MetalLBProvider
from lbconform.wait import poll_until
from lbconform_lab import build, upstream
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab
from tests.lab.helpers import (
    answers_through,
    certification,
    deploy_backend,
    kill_and_time_the_move,
    the_announcing_node,
    wait_for_vip,
)
from tests.lab.runs import DECLARATIONS, lbconform_run, outcome
from tests.lab.test_lifecycle import assert_nothing_left, cli, one_line_error, root_namespace_snapshot
from tests.lab.test_user_path import features, verdicts

pytestmark = [pytest.mark.lab, pytest.mark.lab_lifecycle, pytest.mark.own_lab]

#: MetalLB assigns and announces within seconds of the Service; this bounds a lab under load.
VIP_SECONDS = 30.0

#: What MetalLB does not claim, so core and extended report it not supported, with its reason:
#: it probes nothing (health-check transitions, and the ``p < u`` and ``g < p`` ordering
#: violations, which rest on a time to unhealthy longer than the app serves), sets no
#: ``load-balancer-cleanup`` finalizer, announces nodes and not
#: pod IPs (layer 2), and has no idle timeout of its own (it forwards nothing: kube-proxy does);
#: under policy Local its one announcing node's backend is the only one that answers, so a switch
#: of session affinity cannot show; its ingress is ipMode VIP, so a pod's path through the LB
#: does not exist; a rollout of its speakers moves each address to another node and back, so the
#: connections established before it are not held to it (its new connections and address are);
#: and under policy Local the address moves when its node's last endpoint goes, resetting what is
#: under way through that node, so no rollout, drain or deletion that replaces that endpoint is hitless.
NOT_SUPPORTED_ON_METALLB = {
    *(f"test_health_checks::{t}" for t in (
        "test_healthy_after_new_local_endpoint_ready",
        "test_node_to_be_deleted_leaves_cluster_policy_pool",
        "test_only_terminating_endpoints_fail_the_health_check",
        "test_unhealthy_after_last_local_endpoint_gone")),
    *(f"test_graceful_termination::test_ordering_violation_fails_requests[{v}]"
      for v in ("p-below-u", "g-below-p")),
    "test_lifecycle::test_cleanup_finalizer_while_provisioned",
    "test_session_affinity::test_affinity_switched_on_and_off",
    "test_in_cluster_clients::test_pod_traffic_to_a_proxy_address_crosses_the_load_balancer",
    *(f"test_backend_pool::{t}" for t in (
        "test_pod_pool_equals_ready_pod_ips", "test_pod_pool_follows_a_burst_of_changes",
        "test_pod_pool_follows_scale_down", "test_pod_pool_follows_scale_up")),
    *(f"test_idle_and_keepalive::{t}" for t in (
        "test_flows_idle_below_the_timeout_survive_a_change",
        "test_flows_idle_beyond_the_timeout_move_after_a_change",
        "test_flows_idle_beyond_the_timeout_survive_without_a_change", "test_idle_timeout_measured",
        "test_idled_out_flows_reset_when_asked", "test_keepalive_shorter_than_idle_survives_changes")),
    "chaos/test_lb_restart::test_restart_under_load_fails_no_request[node-agents]",
    "test_graceful_termination::test_rolling_update_fails_no_request[Local-daemonset]",
    "test_graceful_termination::test_rolling_update_fails_no_request[Local-deployment]",
    "test_graceful_termination::test_in_flight_requests_finish_during_pre_stop",
    "chaos/test_drain_and_rollout::test_node_drain_fails_no_request",
}


#: The chaos profile's tests that pass: churn (3), the rolling restart (1), a node kill per traffic
#: policy (2), the controller's restart (1); the speakers' restart and the drain are not supported
#: (above).
CHAOS_TESTS = 7


#: The certification's profiles, run through MetalLB's provider and through its declaration.
CERTIFY = ("--profile", "core", "--profile", "extended", "--profile", "chaos", "--allow-disruptive",
           "-n", "3")
#: ``lab up --lb metallb`` from ``lbconform run`` (boot, MetalLB's manifest, its pods ready).
BOOT_SECONDS = 300.0


def test_metallb_certifies_through_its_provider_and_its_declaration(no_lab: Lab, tmp_path: Path) -> None:
    """``run --provider metallb`` boots the MetalLB lab, and core, extended and chaos pass there:
    every test passes or is not supported for a reason MetalLB's model gives, the node kills hit the
    announcing node, and the datasheet has the failover time beside MetalLB's declared one. Beside
    it, once the lab is up, the user's path: the generic provider with MetalLB's declaration file
    (docs/declarations/metallb.yaml) through the lab's kubeconfig gives the same verdicts, test by
    test and feature by feature, the announcing node read from MetalLB's ServiceL2Status objects as
    the declaration describes them. Then, on that lab, the address of a Service of MetalLB's pool
    answers the client through the node whose speaker answered ARP (the node MetalLB names), a
    killed announcing node's address answers from another node within MetalLB's declared failover
    time, and ``lab down`` leaves nothing."""
    if not build.METALLB.is_built(build.cache_root()):
        pytest.fail("MetalLB is not built: the README's commands build it "
                    "('lbconform lab build --with metallb')")
    before = root_namespace_snapshot()
    window = MetalLBProvider().declared().node_failure_window
    declared = None
    with ThreadPoolExecutor(2, thread_name_prefix="metallb-run") as pool:
        provider_run = pool.submit(lbconform_run, "--provider", "metallb", "--keep-lab", *CERTIFY,
                                   report_dir=tmp_path / "provider")
        try:
            poll_until(lambda: provider_run.done() or (no_lab.dir.exists() and no_lab.dir.read().ready),
                       timeout=BOOT_SECONDS, interval=1.0, description="the MetalLB lab the run boots")
            if not provider_run.done():
                declared = pool.submit(
                    lbconform_run, "--kubeconfig", str(no_lab.dir.kubeconfig), "--provider", "generic",
                    "--declaration", str(DECLARATIONS / "metallb.yaml"), "--client-netns", topo.CLIENT_NS,
                    *CERTIFY, report_dir=tmp_path / "declared")
            result = provider_run.result()
            assert result.returncode == 0, outcome(result)
            assert "lab booted" in result.stderr
            doc = yaml.safe_load((tmp_path / "provider" / "conformance-report.yaml").read_text())
            assert doc["target"]["provider"] == "metallb"
            certification(doc, NOT_SUPPORTED_ON_METALLB, CHAOS_TESTS, window)
            assert declared is not None, "the provider's run ended before its lab was up"
            declared_result = declared.result()
            assert declared_result.returncode == 0, outcome(declared_result)
            declared_doc = yaml.safe_load((tmp_path / "declared" / "conformance-report.yaml").read_text())
            assert declared_doc["target"]["provider"] == "generic"
            assert declared_doc["implementation"]["project"] == "MetalLB (layer 2)"
            certification(declared_doc, NOT_SUPPORTED_ON_METALLB, CHAOS_TESTS, window)
            assert verdicts(declared_doc) == verdicts(doc)
            assert features(declared_doc) == features(doc)
            arp_and_failover(no_lab, window)
            assert no_lab.down() is True
            assert_nothing_left(no_lab.dir, before)
        finally:
            if declared is not None:
                declared.result()
            provider_run.result()
            no_lab.down()


def arp_and_failover(lab: Lab, window: float) -> None:
    """On the MetalLB lab: a Service's address from MetalLB's pool answers through the announcing
    node, and moves when that node dies."""
    state = lab.dir.read()
    assert state.lb == "metallb", state.lb
    assert "lb" not in state.processes, "the reference LB must not run beside MetalLB"
    api = lab.api()
    namespace = Applier(api, None).create({"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": "metallb-test"}})["metadata"]["name"]
    deploy_backend(Applier(api, namespace), one_per_node)
    vip = wait_for_vip(api, namespace, timeout=VIP_SECONDS)
    assert upstream.in_pool_range(vip), f"{vip} is not in MetalLB's pool {upstream.POOL_RANGE}"
    provider = MetalLBProvider()
    provider.configure(api, {})
    node = the_announcing_node(provider, namespace, state.nodes, VIP_SECONDS)
    answers_through(vip, node, VIP_SECONDS)
    kill_and_time_the_move(lab, vip, node, window, "MetalLB")


@pytest.mark.parametrize("args, says", [
    (["--lb", "nope"], "--lb 'nope': the lab's load balancers are reference, metallb, kube-vip"),
    (["--lb", "metallb", "--lb-defect", "ignore-health"], "defects belong to the reference LB"),
    (["--lb", "metallb", "--lb-mode", "pod"], "modes belong to the reference LB"),
    (["--lb", "kube-vip", "--lb-defect", "ignore-health"], "defects belong to the reference LB"),
])
def test_bad_lb_choices_are_refused_in_one_line_before_anything_is_made(
        no_lab: Lab, args: list[str], says: str) -> None:
    before = root_namespace_snapshot()
    assert says in one_line_error(cli("lab", "up", *args))
    assert_nothing_left(no_lab.dir, before)


@pytest.mark.parametrize("lb", ["metallb", "kube-vip"])
def test_a_third_party_lb_before_its_build_names_the_build_command(no_lab: Lab, tmp_path: Path,
                                                                   lb: str) -> None:
    """With a cache that has the lab's binaries but not MetalLB's (or kube-vip's), ``lab up --lb
    NAME`` says how to build it, and makes nothing."""
    cache = tmp_path / "cache"
    for art in build.ARTIFACTS:
        (cache / "bin").mkdir(parents=True, exist_ok=True)
        (cache / "bin" / art.key).symlink_to(art.bin_dir(build.cache_root()))
    before = root_namespace_snapshot()
    env = dict(os.environ, LBCONFORM_CACHE=str(cache), LBCONFORM_LAB_DIR=str(no_lab.dir.root))
    error = one_line_error(cli("lab", "up", "--lb", lb, env=env))
    assert f"lbconform lab build --with {lb}" in error
    assert_nothing_left(no_lab.dir, before)
