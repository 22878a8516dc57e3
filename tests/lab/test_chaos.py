"""The chaos side on the lab: every experiment runs standalone (``chaos run experiments/NAME.json``
with KUBECONFIG in the environment, as a user runs it) and passes on the reference LB (the ones
that touch no node side by side, each on its own backends, as users run experiments); the chaos
profile passes through ``lbconform run --allow-disruptive``; a disruptive experiment without
``allow_disruptive`` touches no node.

The standalone experiments go on while the chaos runs do (``chaos_runs``), through the cluster's
gate as the runs' tests: a disruptive one has the cluster alone, those that touch no node share it
once the runs' exclusive tests have ended."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path

import pytest
import yaml

from fixtures.chaos import Experiment
from lbconform.chaos.runner import experiment_path, parse_journal, var_arg
from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier, load_one
from lbconform.kube.namespaces import TestNamespaces
from lbconform.kube.rawapi import Json, RawApi
from lbconform.pytest_plugin import cluster_share, share_lock_of
from lbconform.termination import Ordering
from lbconform_lab.cluster import Lab
from lbconform_lab.provider import LabProvider
from tests.lab.helpers import (
    LabSession,
    deploy_backend,
    not_supported_with_reasons,
    wait_for_healthy,
    wait_for_vip,
)
from tests.lab.runs import CHAOS_PROFILE, ConcurrentRuns, ExclusivesFirst, Result, outcome, selected_runs

pytestmark = pytest.mark.lab

RESTART = "chaos/test_lb_restart::test_restart_under_load_fails_no_request"

#: The node the disruptive experiments may touch; the backends avoid it where a dead pod would
#: fail requests through kube-proxy on other nodes (not the LB's doing).
VICTIM = "node-3"
ALLOWED = {"node": VICTIM, "allowed_nodes": VICTIM, "allow_disruptive": True}
#: Per experiment: its configuration for a short run against the test's backends.
EXPERIMENTS: dict[str, dict[str, object]] = {
    "rolling-restart": {"traffic_seconds": 40, "rollout_timeout": 60},
    "scale-to-zero": {"traffic_seconds": 45, "zero_seconds": 5, "rollout_timeout": 45},
    "backend-flap": {"traffic_seconds": 60, "flap_cycles": 2},
    "node-drain": {**ALLOWED, "traffic_seconds": 40, "drain_timeout": 60},
    "kube-proxy-restart": {**ALLOWED, "traffic_seconds": 25},
    "lb-restart": {"allow_disruptive": True, "traffic_seconds": 25},
    # The failure budget is set from the LB's declared detection (node_kill_window below). The
    # node is dead long enough to go NotReady (the lab's grace period, 8 s, and the node
    # controller's 5 s period), so that its pods do too.
    "node-kill": {**ALLOWED, "traffic_seconds": 22, "observe_seconds": 15},
}
#: node-kill's traffic rate (the experiment's default).
NODE_KILL_RATE = 20
#: A whole standalone run: traffic, pauses, rollbacks (a node restart), Python start-up.
EXPERIMENT_SECONDS = 240
#: The experiments that touch no node run side by side, each against its own backends; the
#: disruptive ones go one at a time before them.
SIDE_BY_SIDE = ("backend-flap", "rolling-restart", "scale-to-zero")
ORDER = (*sorted(set(EXPERIMENTS) - set(SIDE_BY_SIDE)), *SIDE_BY_SIDE)
#: The chaos runs' exclusive tests and the disruptive experiments, one at a time, end within this.
CHAOS_EXCLUSIVES_SECONDS = 900


def node_kill_window() -> float:
    """How long after a node dies the reference LB may still send it new connections, as
    suites/chaos/test_node_failure.py reads it from the declaration."""
    return LabProvider().declared_for("Cluster").node_failure_window


def node_kill_budget(window: float, pool: int = 3) -> list[int]:
    """The dead node's share of every new connection in the window, twice over (the hash is
    even only on average: 42 of the 90 sent in one 4.5 s window went to one of three nodes)."""
    return [0, math.ceil(2 * NODE_KILL_RATE * window / pool)]


def test_every_experiment_is_in_the_table() -> None:
    assert set(EXPERIMENTS) == {p.stem for p in experiment_path("node-kill").parent.glob("*.json")}


def chaos_run(name: str, namespace: str, tmp_path: Path, **configuration: object) -> dict[str, object]:
    """``chaos run`` of one experiment file, as a user runs it; its journal."""
    journal = tmp_path / f"{name}.journal.json"
    argv = [str(Path(sys.executable).with_name("chaos")), "--no-version-check", "run",
            "--journal-path", str(journal)]
    for key, value in {"namespace": namespace, "lbconform_state_dir": str(tmp_path), **configuration}.items():
        argv += ["--var", var_arg(key, value)]
    env = {**os.environ, "KUBECONFIG": str(Lab().dir.kubeconfig)}
    proc = subprocess.run([*argv, str(experiment_path(name))], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=EXPERIMENT_SECONDS, check=False)
    assert journal.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc: dict[str, object] = json.loads(journal.read_text())
    doc["_output"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    return doc


#: A per-node agent for the node-kill experiment: a DaemonSet whose pods are Ready only seconds
#: after they start, as an implementation's speakers are.
NODE_AGENT, AGENT_READY_DELAY = "node-agent", 5


def node_agent(obj: Json) -> None:
    obj["metadata"]["name"] = NODE_AGENT
    template = obj["spec"]["template"]
    obj["spec"]["selector"]["matchLabels"] = template["metadata"]["labels"] = {"app": NODE_AGENT}
    template["spec"]["containers"][0]["readinessProbe"]["initialDelaySeconds"] = AGENT_READY_DELAY


def agent_on(api: RawApi, namespace: str, node: str) -> Json:
    return next(p for p in objects.pods(api, namespace, f"app={NODE_AGENT}")
                if p["spec"].get("nodeName") == node)


def run_standalone(name: str, namespace: Applier, tmp_path: Path) -> dict[str, object]:
    """Backends for ``name`` in ``namespace``, served by the LB, then ``chaos run`` of the experiment
    against them; its journal. For node-kill, a node agent too, on every node."""
    order = Ordering.correct(LabProvider().declared())
    avoid = [tweaks.avoid_node(VICTIM)] if name == "node-kill" else []
    deploy_backend(namespace, *order.tweaks(), *avoid, tweaks.replicas(2 if avoid else 3))
    assert namespace.namespace
    if name == "node-kill":
        agents = namespace.create(load_one("backend-daemonset", node_agent))
        objects.wait_for_daemonset(namespace.api, namespace.namespace, agents["metadata"]["name"])
    wait_for_vip(namespace.api, namespace.namespace)
    wait_for_healthy(namespace.namespace, 3)
    extra = {"failure_tolerance": node_kill_budget(node_kill_window())} if name == "node-kill" else {}
    journal = chaos_run(name, namespace.namespace, tmp_path, **EXPERIMENTS[name], **extra)
    if name == "node-kill":  # as the experiment ended
        journal["_agent"] = agent_on(namespace.api, namespace.namespace, VICTIM)
    return journal


def run_in_a_namespace(namespaces: TestNamespaces, name: str, tmp_path: Path) -> dict[str, object]:
    """``run_standalone`` in a fresh namespace, removed after whatever the outcome."""
    namespace = namespaces.create()
    try:
        tmp_path.mkdir(parents=True, exist_ok=True)
        return run_standalone(name, namespace, tmp_path)
    finally:
        namespaces.release(namespace)


def the_cluster(kube: RawApi, exclusive: bool) -> AbstractContextManager[object]:
    """The lab's share, held as a suite test holds it (alone where ``exclusive``)."""
    return cluster_share(share_lock_of(str(kube.api.configuration.host)), exclusive=exclusive)


def run_beside_chaos(namespaces: TestNamespaces, exclusives: ExclusivesFirst, kube: RawApi,
                     name: str, tmp_path: Path) -> dict[str, object]:
    """``run_in_a_namespace`` once the chaos runs' exclusive tests have ended, sharing the cluster."""
    exclusives.wait(CHAOS_EXCLUSIVES_SECONDS)
    with the_cluster(kube, exclusive=False):
        return run_in_a_namespace(namespaces, name, tmp_path)


@pytest.fixture(scope="module")
def gentle_runs(lab_session: LabSession, lab_namespaces: TestNamespaces, chaos_exclusives: ExclusivesFirst,
                request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConcurrentRuns[dict[str, object]]]:
    """The selected experiments that touch no node, all at once, each in a namespace of its own."""
    kube = lab_session.ensure_up().api()
    start = partial(run_beside_chaos, lab_namespaces, chaos_exclusives, kube)
    with selected_runs(request, tmp_path_factory, "test_experiment_runs_standalone_and_passes", "name", start,
                       len(SIDE_BY_SIDE), among=SIDE_BY_SIDE) as runs:
        yield runs


@pytest.mark.parametrize("name", ORDER)
def test_experiment_runs_standalone_and_passes(name: str, chaos_exclusives: ExclusivesFirst,
                                               gentle_runs: ConcurrentRuns[dict[str, object]],
                                               lab_namespaces: TestNamespaces, kube: RawApi,
                                               tmp_path: Path) -> None:
    cordoned: list[str] = []  # the experiments that touch no node leave none cordoned
    if name in SIDE_BY_SIDE:
        journal, tmp_path = gentle_runs.result(name)
    else:  # alone, between the chaos runs' exclusive tests: a drained or killed node fails requests
        with the_cluster(kube, exclusive=True):
            journal = run_in_a_namespace(lab_namespaces, name, tmp_path)
            cordoned = [n["metadata"]["name"] for n in kube.get("/api/v1/nodes")["items"]
                        if n["spec"].get("unschedulable")]
    after = journal["steady_states"]["after"]  # type: ignore[index]
    values = {p["activity"]["name"]: p["output"] for p in after["probes"]}  # type: ignore[index]
    assert journal["status"] == "completed" and not journal["deviated"], (values, journal["_output"])
    assert all(r["status"] == "succeeded" for r in journal["rollbacks"]), journal["rollbacks"]  # type: ignore[union-attr]
    assert not cordoned, f"{cordoned} left cordoned"
    if name == "node-kill":  # an LB that never drops the dead node fails here, whatever the count
        window = node_kill_window()
        run = Experiment(parse_journal(name, journal, 0, tmp_path / f"{name}.journal.json", tmp_path))
        killed = run.started("kill-node")
        late = [round(f["at"] - killed, 2) for f in run.failures_after(killed) if f["at"] - killed > window]
        assert not late, f"new connections failed {late} s after the kill, beyond the declared {window:g} s"
        # The rollback returned with the node whole: its DaemonSet's pod runs, Ready, again.
        agent: Json = journal["_agent"]  # type: ignore[assignment]
        assert objects.pod_ready(agent), (
            f"{VICTIM}'s node agent is not Ready after the rollback: {agent['status'].get('conditions')}")


def test_disruptive_experiment_refused_without_the_switch(test_namespace: Applier, kube: RawApi,
                                                         tmp_path: Path) -> None:
    deploy_backend(test_namespace, tweaks.replicas(1))
    assert test_namespace.namespace
    with the_cluster(kube, exclusive=True):  # no chaos run's node kill meanwhile
        before = Lab().status().processes
        journal = chaos_run("node-kill", test_namespace.namespace, tmp_path, node=VICTIM,
                            allowed_nodes=VICTIM)
        after = Lab().status().processes
    assert journal["status"] == "failed" and not journal["run"], journal["_output"]
    assert after == before and all(before.values()), before


def test_chaos_profile_passes_on_the_reference_lb(chaos_runs: ConcurrentRuns[Result]) -> None:
    """The chaos profile through ``lbconform run -n 3``, beside the chaos rows of
    test_suites_catch_defects.py (their disruptive tests one at a time through the cluster's gate);
    the next tests start once every chaos run has ended, since they do not take the gate."""
    result, report_dir = chaos_runs.result(CHAOS_PROFILE)
    chaos_runs.wait_all()
    assert result.returncode == 0, outcome(result)
    doc = yaml.safe_load((report_dir / "conformance-report.yaml").read_text())
    chaos = next(p for p in doc["profiles"] if p["name"] == "chaos")
    # partial: the reference LB runs no per-node agents to restart
    assert chaos["result"] == "partial" and len(chaos["tests"]["passed"]) == 8, chaos
    assert not_supported_with_reasons(chaos) == {f"{RESTART}[node-agents]"}, chaos
    names = {m["name"] for m in doc["measurements"]}
    assert {"node_kill_lb_dropped_node_after", "rollout_locust_requests", "drain_locust_requests",
            "kube_proxy_restart_failed_requests", "backend_flap_failed_requests",
            "lb_restart_controller_failed_requests"} <= names
    journals = list((report_dir / "chaos").glob("*/journal.json"))
    assert len(journals) == 8, journals
