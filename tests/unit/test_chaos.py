"""The chaos experiments and lbconform's chaostoolkit activities, without a cluster.

Every experiment passes chaoslib's own validation (which imports each activity's module and
binds its arguments); every node-touching experiment names its nodes and is refused without
allow_disruptive; the recorder and ``chaos run`` (through the runner, in a subprocess) are
exercised against an HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed
from chaoslib.experiment import ensure_experiment_is_valid

from lbconform.chaos import guard
from lbconform.chaos.backend import actions as backend_actions
from lbconform.chaos.deployment.probes import rollout_complete
from lbconform.chaos.kubeproxy import actions as kubeproxy_actions
from lbconform.chaos.node import actions as node_actions
from lbconform.chaos.runner import ExperimentError, experiment_path, run_experiment, var_arg
from lbconform.chaos.traffic import recording
from lbconform.chaos.traffic.recorder import main as recorder_main
from lbconform.providers.base import NotSupported
from lbconform.providers.generic import GenericProvider
from lbconform.providers.kind import KindProvider
from lbconform.resources import experiments_dir
from tests.unit.backend import NAME, serving

EXPERIMENTS = sorted(experiments_dir().glob("*.json"))
#: Activities that touch nodes; an experiment using any of them is disruptive.
NODE_MODULES = ("lbconform.chaos.node.actions", "lbconform.chaos.kubeproxy.actions")
NODE_ARGUMENTS = ("name", "node")
LB_MODULE = "lbconform.chaos.lb.actions"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def activities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    probes = (doc.get("steady-state-hypothesis") or {}).get("probes", [])
    return [*probes, *doc.get("method", []), *doc.get("rollbacks", [])]


def node_activities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in activities(doc) if a["provider"].get("module") in NODE_MODULES]


def lb_activities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Activities that restart the implementation's controller: disruptive, touching no node."""
    return [a for a in activities(doc) if a["provider"].get("module") == LB_MODULE]


@pytest.fixture
def server() -> Iterator[int]:
    with serving() as port:
        yield port


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the experiments ----------------------------------------------------------------------
def test_the_issue_experiments_are_all_there() -> None:
    assert {p.stem for p in EXPERIMENTS} == {
        "node-kill", "node-drain", "rolling-restart", "scale-to-zero", "kube-proxy-restart", "backend-flap",
        "lb-restart"}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_is_valid_for_chaoslib(path: Path) -> None:
    doc = load(path)
    ensure_experiment_is_valid(doc)
    assert doc["runtime"]["rollbacks"]["strategy"] == "always"
    assert doc["configuration"].get("allow_disruptive", False) is False


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_hypothesis_states_the_budgets(path: Path) -> None:
    doc = load(path)
    probes = {p["provider"]["func"]: p for p in doc["steady-state-hypothesis"]["probes"]}
    assert probes["traffic_failures"]["tolerance"] == "${failure_tolerance}"
    assert probes["traffic_resets"]["tolerance"] == "${reset_tolerance}"
    for key in ("failure_tolerance", "reset_tolerance"):
        low, high = doc["configuration"][key]
        assert low == 0 <= high


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_node_touching_experiment_names_its_nodes_and_is_refused_by_default(path: Path) -> None:
    doc = load(path)
    config = doc["configuration"]
    touching = node_activities(doc)
    assert ("disruptive" in doc["tags"]) == bool(touching or lb_activities(doc))
    if not touching:
        return
    allowed = guard.allowed_nodes(config)
    assert allowed and config["node"] in allowed
    for activity in touching:
        args = activity["provider"]["arguments"]
        assert [args[k] for k in NODE_ARGUMENTS if k in args] == ["${node}"], activity["name"]
    first = doc["steady-state-hypothesis"]["probes"][0]
    assert (first["provider"]["func"], first["tolerance"]) == ("disruption_allowed", True)
    with pytest.raises(ActivityFailed, match="allow_disruptive"):
        guard.disruption_allowed(nodes=config["node"], configuration=config)
    allowed_config = {**config, "allow_disruptive": "true"}
    assert guard.disruption_allowed(nodes=config["node"], configuration=allowed_config)
    with pytest.raises(ActivityFailed, match="may touch only"):
        guard.disruption_allowed(nodes="some-other-node", configuration=allowed_config)


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if lb_activities(load(p))], ids=lambda p: p.stem)
def test_lb_restarting_experiment_is_refused_by_default(path: Path) -> None:
    doc = load(path)
    first = doc["steady-state-hypothesis"]["probes"][0]
    assert (first["provider"]["func"], first["tolerance"]) == ("switch_on", True)
    what = first["provider"]["arguments"]["what"]
    with pytest.raises(ActivityFailed, match=f"refused to {what}: .*allow_disruptive"):
        guard.switch_on(what, configuration=doc["configuration"])
    assert guard.switch_on(what, configuration={**doc["configuration"], "allow_disruptive": "true"})


def test_experiment_path_finds_by_name_and_names_the_known_ones() -> None:
    assert experiment_path("node-kill") == experiments_dir() / "node-kill.json"
    assert experiment_path("node-kill.json") == experiments_dir() / "node-kill.json"
    with pytest.raises(Exception, match="rolling-restart"):
        experiment_path("no-such")


# --- the guard ----------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "allowed"), [
    (True, True), ("true", True), ("TRUE", True), ("yes", True), ("1", True),
    (False, False), ("false", False), ("", False), (None, False), ("0", False)])
def test_allow_disruptive_flag(value: object, allowed: bool) -> None:
    assert guard.disruptive_allowed({"allow_disruptive": value}) is allowed


def test_guard_refuses_unless_allowed_and_listed() -> None:
    config = {"allow_disruptive": True, "allowed_nodes": "node-2, node-3"}
    guard.check_nodes(config, ["node-2"])
    guard.check_nodes({**config, "allowed_nodes": ["node-2", "node-3"]}, ["node-3", "node-2"])
    with pytest.raises(ActivityFailed) as refused:
        guard.check_nodes(config, ["node-2", "node-1"])
    assert "node-1" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ActivityFailed, match="allow_disruptive"):
        guard.check_nodes({**config, "allow_disruptive": False}, ["node-2"])
    with pytest.raises(ActivityFailed, match="no node"):
        guard.check_nodes(config, [""])
    with pytest.raises(ActivityFailed, match="may touch only no node"):
        guard.check_nodes({"allow_disruptive": True}, ["node-2"])


@pytest.mark.parametrize("call", [
    lambda c: node_actions.kill_node(name="node-1", configuration=c),
    lambda c: node_actions.start_node(name="node-1", configuration=c),
    lambda c: node_actions.drain_node(name="node-1", configuration=c),
    lambda c: node_actions.cordon_node(name="node-1", configuration=c),
    lambda c: node_actions.uncordon_node(name="node-1", configuration=c),
    lambda c: kubeproxy_actions.restart_kube_proxy(node="node-1", configuration=c),
], ids=["kill", "start", "drain", "cordon", "uncordon", "kube-proxy"])
def test_node_actions_refuse_a_node_not_allowed_before_touching_anything(
        call: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def touched(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused action reached the provider or the API")

    monkeypatch.setattr(node_actions, "provider", touched)
    monkeypatch.setattr(kubeproxy_actions, "provider", touched)
    monkeypatch.setattr("chaosk8s.node.actions.drain_nodes", touched)
    monkeypatch.setattr("chaosk8s.node.actions.cordon_node", touched)
    monkeypatch.setattr("chaosk8s.node.actions.uncordon_node", touched)
    with pytest.raises(ActivityFailed, match="allow_disruptive"):
        call({"allowed_nodes": "node-1"})
    with pytest.raises(ActivityFailed, match="may touch only node-2"):
        call({"allow_disruptive": True, "allowed_nodes": "node-2"})


def test_kill_node_goes_through_the_configured_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[str] = []

    class Fake(GenericProvider):
        def kill_node(self, name: str) -> None:
            killed.append(name)

    monkeypatch.setattr(node_actions, "provider", lambda configuration: Fake())
    config = {"allow_disruptive": "true", "allowed_nodes": "node-2"}
    assert node_actions.kill_node(name="node-2", configuration=config) == "node-2"
    assert killed == ["node-2"]
    # A provider without node kill is an extension point, reported as the activity's failure.
    monkeypatch.setattr(node_actions, "provider", lambda configuration: GenericProvider())
    with pytest.raises(ActivityFailed, match="extension point"):
        node_actions.kill_node(name="node-2", configuration=config)


# --- providers ----------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["kill_node", "start_node", "restart_kube_proxy"])
def test_provider_node_methods_are_extension_points(method: str) -> None:
    with pytest.raises(NotSupported, match=f"extension point: {method}"):
        getattr(GenericProvider(), method)("node-1")


def test_kind_kills_and_starts_the_node_container(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("lbconform.providers.kind.subprocess.run", run)
    provider = KindProvider()
    provider.configure(None, {"runtime": "podman"})
    provider.kill_node("kind-worker2")
    provider.start_node("kind-worker2")
    assert calls == [["podman", "stop", "-t", "0", "kind-worker2"], ["podman", "start", "kind-worker2"]]


# --- deployment and backend helpers -------------------------------------------------------
def deployment(generation: int, observed: int, replicas: int, updated: int, total: int,
               available: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "replicas": total,
                       "availableReplicas": available}}


def test_rollout_complete_as_kubectl_rollout_status() -> None:
    assert rollout_complete(deployment(2, 2, 3, 3, 3, 3))
    assert not rollout_complete(deployment(2, 1, 3, 3, 3, 3))  # spec change not seen yet
    assert not rollout_complete(deployment(2, 2, 3, 2, 4, 3))  # an old pod still there
    assert not rollout_complete(deployment(2, 2, 3, 3, 3, 2))  # a new pod not available
    assert rollout_complete({"metadata": {"generation": 3}, "spec": {"replicas": 0},
                             "status": {"observedGeneration": 3}})


def test_flap_needs_enough_ready_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    class Api:
        def get(self, path: str, **query: object) -> dict[str, Any]:
            return {"items": [{"metadata": {"name": "backend-a"},
                               "status": {"conditions": [{"type": "Ready", "status": "False"}]}}]}

    monkeypatch.setattr(backend_actions, "kube_api", Api)
    with pytest.raises(ActivityFailed, match="1 ready pods matching app=backend in default wanted, 0 found"):
        backend_actions.flap_backends(ns="default", label_selector="app=backend")


# --- traffic ------------------------------------------------------------------------------
def test_failures_count_by_kind_and_since_a_mark() -> None:
    doc = {"outcomes": {"reset": 2, "timeout": 1},
           "failures": [{"at": 10.0, "kind": "reset"}, {"at": 20.0, "kind": "timeout"},
                        {"at": 30.0, "kind": "reset"}]}
    assert recording.failures(doc, None, None) == 3
    assert recording.failures(doc, {"reset"}, None) == 2
    assert recording.failures(doc, None, 20.0) == 2
    assert recording.failures(doc, {"reset"}, 25.0) == 1


def test_probes_read_zero_before_any_traffic() -> None:
    from lbconform.chaos.traffic import probes

    assert probes.traffic_failures(name="never-started") == 0
    assert probes.traffic_resets(name="never-started", since_mark="restored") == 0


def test_recorder_writes_its_result(server: int, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert recorder_main(["--address", "127.0.0.1", "--port", str(server), "--rate", "20",
                          "--seconds", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["requests"] >= 30 and doc["ok"] == doc["requests"]
    assert (doc["failed"], doc["resets"], doc["error"]) == (0, 0, "")
    assert doc["backends"] == {NAME: doc["ok"]}
    assert doc["ended"] - doc["started"] >= 1.9


def test_recorder_counts_failures(closed_port: int, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    recorder_main(["--address", "127.0.0.1", "--port", str(closed_port), "--rate", "20", "--seconds", "1",
                   "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["requests"] > 0 and doc["failed"] == doc["requests"] == doc["outcomes"]["refused"]
    assert len(doc["failures"]) == doc["failed"] and doc["failures"][0]["kind"] == "refused"


def test_recorder_reports_a_namespace_it_cannot_enter(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert recorder_main(["--address", "127.0.0.1", "--port", "9", "--rate", "1", "--seconds", "1",
                          "--netns", "lbc-no-such-namespace", "--out", str(out)]) == 1
    assert "lbc-no-such-namespace" in json.loads(out.read_text())["error"]


# --- chaos run, through the runner --------------------------------------------------------
TINY = {
    "version": "1.0.0",
    "title": "traffic alone",
    "description": "lbconform's traffic activities in a real chaos run, against a plain host",
    "tags": ["test"],
    "configuration": {"traffic_address": "127.0.0.1", "traffic_netns": "", "service_port": 9,
                      "lbconform_provider": "generic", "lbconform_state_dir": "", "failure_tolerance": [0, 0],
                      "reset_tolerance": [0, 0]},
    "runtime": {"rollbacks": {"strategy": "always"}},
    "steady-state-hypothesis": {"title": "no failure", "probes": [
        {"type": "probe", "name": "failures", "tolerance": "${failure_tolerance}", "provider": {
            "type": "python", "module": "lbconform.chaos.traffic.probes", "func": "traffic_failures"}},
        {"type": "probe", "name": "resets", "tolerance": "${reset_tolerance}", "provider": {
            "type": "python", "module": "lbconform.chaos.traffic.probes", "func": "traffic_resets"}}]},
    "method": [
        {"type": "action", "name": "start-traffic", "provider": {
            "type": "python", "module": "lbconform.chaos.traffic.actions", "func": "start_traffic",
            "arguments": {"port": "${service_port}", "rate": 20, "seconds": 2,
                          "address": "${traffic_address}", "netns": "${traffic_netns}"}}},
        {"type": "action", "name": "mark", "provider": {
            "type": "python", "module": "lbconform.chaos.traffic.actions", "func": "mark_traffic",
            "arguments": {"label": "marked"}}},
        {"type": "probe", "name": "traffic-result", "provider": {
            "type": "python", "module": "lbconform.chaos.traffic.probes", "func": "traffic_result"}}],
    "rollbacks": [{"type": "action", "name": "stop-traffic", "provider": {
        "type": "python", "module": "lbconform.chaos.traffic.actions", "func": "stop_traffic"}}],
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    ensure_experiment_is_valid(json.loads(path.read_text()))
    return path


def test_chaos_run_completes_with_the_traffic_in_the_journal(tiny: Path, server: int, tmp_path: Path) -> None:
    started = time.monotonic()
    run = run_experiment(str(tiny), kubeconfig=tmp_path / "no-kubeconfig", timeout=120,
                         workdir=tmp_path / "run", variables={"service_port": server})
    assert (run.status, run.deviated, run.returncode, run.failed_activities) == ("completed", False, 0, [])
    assert run.completed
    assert run.hypothesis == {"failures": 0, "resets": 0}
    result = run.method["traffic-result"]
    assert result["requests"] >= 30 and result["ok"] == result["requests"]
    assert result["port"] == server and result["netns"] == "" and "marked" in result["marks"]
    assert time.monotonic() - started < 60
    assert json.loads(next((tmp_path / "run").glob("lbconform-traffic-*.json")).read_text()) == {
        k: v for k, v in result.items() if k != "marks"}


def test_chaos_run_takes_relative_paths_from_the_callers_directory(tiny: Path, server: int, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = run_experiment("tiny.json", timeout=120, workdir=Path("run"), variables={"service_port": server})
    assert (run.status, run.deviated) == ("completed", False)
    assert (tmp_path / "run" / "journal.json").is_file()


def test_runner_refuses_a_variable_the_experiment_does_not_declare(tiny: Path) -> None:
    with pytest.raises(ExperimentError, match="no configuration 'failure_budget'"):
        run_experiment(str(tiny), variables={"failure_budget": 3})


def test_chaos_run_deviates_when_the_traffic_fails(tiny: Path, closed_port: int, tmp_path: Path) -> None:
    run = run_experiment(str(tiny), timeout=120, workdir=tmp_path / "run",
                         variables={"service_port": closed_port})
    assert (run.status, run.deviated, run.returncode) == ("completed", True, 1)
    assert run.hypothesis["failures"] == run.method["traffic-result"]["requests"] > 0


def test_var_args_are_typed() -> None:
    assert var_arg("allow_disruptive", True) == "allow_disruptive:bool=true"
    assert var_arg("replicas", 3) == "replicas:int=3"
    assert var_arg("traffic_rate", 2.5) == "traffic_rate:float=2.5"
    assert var_arg("failure_tolerance", [0, 5]) == "failure_tolerance:json=[0, 5]"
    assert var_arg("node", "kind-worker") == "node=kind-worker"


DISRUPTIVE = [p for p in EXPERIMENTS if node_activities(load(p)) or lb_activities(load(p))]


@pytest.mark.parametrize("path", DISRUPTIVE, ids=lambda p: p.stem)
def test_chaos_run_of_a_disruptive_experiment_is_refused_before_its_method(path: Path,
                                                                           tmp_path: Path) -> None:
    # The generic provider and no kubeconfig: even a guard that let it through could touch nothing.
    run = run_experiment(path.stem, kubeconfig=tmp_path / "no-kubeconfig", timeout=120, workdir=tmp_path,
                         variables={"lbconform_provider": "generic"})
    assert (run.status, run.deviated, run.method) == ("failed", False, {})
    assert run.hypothesis == {"disruption-allowed": None}
    refusals = [r for r in run.journal["rollbacks"] if r["activity"]["provider"]["module"] in NODE_MODULES]
    assert all(r["status"] == "failed" and "allow_disruptive" in r["exception"][-1] for r in refusals)


def test_auto_traffic_starts_in_the_lab_client_namespace_whatever_lb_the_lab_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A MetalLB lab's VIPs are routed only inside the lab: traffic to them must never start here."""
    from types import SimpleNamespace

    from lbconform.chaos.traffic import actions
    from lbconform_lab.state import LabDir, LabState
    from lbconform_lab.topology import CLIENT_NS

    monkeypatch.setenv("LBCONFORM_LAB_DIR", str(tmp_path / "lab"))
    labdir = LabDir()
    labdir.root.mkdir()
    labdir.write(LabState(nodes=3, api_port=16443, lb="metallb"))

    def api(host: str) -> object:
        return SimpleNamespace(api=SimpleNamespace(configuration=SimpleNamespace(host=host)))

    metallb = {"lbconform_provider": "metallb"}
    monkeypatch.setattr(actions, "kube_api", lambda: api("https://127.0.0.1:16443"))
    assert actions.traffic_netns(actions.AUTO, metallb) == CLIENT_NS
    assert actions.traffic_netns("elsewhere", metallb) == "elsewhere"
    monkeypatch.setattr(actions, "kube_api", lambda: api("https://203.0.113.99:6443"))
    assert actions.traffic_netns(actions.AUTO, metallb) == ""


def test_traffic_to_a_lab_address_never_starts_outside_the_lab(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """With the experiment's cluster a running local cluster, traffic asked to start here (netns "")
    is refused: that cluster's addresses are routed only inside it."""
    from types import SimpleNamespace

    from chaoslib.exceptions import ActivityFailed

    from lbconform.chaos.traffic import actions
    from lbconform_lab.state import LabDir, LabState

    monkeypatch.setenv("LBCONFORM_LAB_DIR", str(tmp_path / "lab"))
    api = SimpleNamespace(api=SimpleNamespace(configuration=SimpleNamespace(host="https://127.0.0.1:16443")))
    monkeypatch.setattr(actions, "kube_api", lambda: api)
    assert actions.local_owner() is None, "no lab runs: the cluster is the user's"
    LabDir().root.mkdir()
    LabDir().write(LabState(nodes=3, api_port=16443, lb="metallb"))
    assert actions.local_owner() is not None
    with pytest.raises(ActivityFailed, match=r"198\.18\.0\.10 is an address of the local lab"):
        actions.start_traffic(address="198.18.0.10", netns="", configuration={"lbconform_provider": "kind"})


def test_restart_of_an_unknown_part_names_the_parts() -> None:
    from lbconform.chaos.lb.actions import restart_load_balancer

    with pytest.raises(ActivityFailed, match="part 'speaker': use one of controller, node-agents"):
        restart_load_balancer("speaker", configuration={"allow_disruptive": "true"})


def test_node_agents_are_not_supported_where_the_provider_names_none() -> None:
    from lbconform.providers.base import NotSupported
    from lbconform.providers.generic import GenericProvider
    from lbconform.providers.metallb import MetalLBProvider
    from lbconform_lab.provider import LabProvider

    with pytest.raises(NotSupported, match="no per-node agents: one process"):
        LabProvider().node_agents()
    with pytest.raises(NotSupported, match="extension point: node_agents"):
        GenericProvider().restart_node_agents()
    assert "speaker DaemonSet" in MetalLBProvider().node_agents()


def test_an_activity_acts_through_the_runs_provider_with_its_declaration_and_mode(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An experiment started by a run through the generic provider and MetalLB's declaration
    restarts the speakers the declaration names; without the declaration it could restart
    nothing. The run's mode and options reach the activity's provider too."""
    from lbconform.chaos.context import provider

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    declaration = Path(__file__).resolve().parents[2] / "docs" / "declarations" / "metallb.yaml"
    with pytest.raises(NotSupported, match="extension point: node_agents"):
        provider({"lbconform_provider": "generic"}).node_agents()
    declared = provider({"lbconform_provider": "generic", "lbconform_declaration": str(declaration),
                         "lbconform_provider_options": {}, "lbconform_provider_mode": ""})
    assert "speaker DaemonSet" in declared.node_agents()
    lab = provider({"lbconform_provider": "lab", "lbconform_provider_mode": "pod",
                    "lbconform_provider_options": {"idleTimeout": "30"}})
    assert (lab.mode, dict(lab.options)) == ("pod", {"idleTimeout": "30"})
    with pytest.raises(ActivityFailed, match="--mode 'sideways'"):
        provider({"lbconform_provider": "lab", "lbconform_provider_mode": "sideways"})


def test_an_experiment_whose_action_failed_is_not_completed(tmp_path: Path) -> None:
    """chaostoolkit completes an experiment whose restart action failed, and its hypothesis holds
    since nothing happened: the run is not taken for completed."""
    from lbconform.chaos.runner import parse_journal

    def journal(status: str) -> dict[str, Any]:
        return {"status": "completed", "deviated": False, "steady_states": {}, "rollbacks": [],
                "run": [{"activity": {"name": "restart-load-balancer"}, "status": status, "output": None}]}

    ok = parse_journal("lb-restart", journal("succeeded"), 0, tmp_path / "j.json", tmp_path / "log")
    failed = parse_journal("lb-restart", journal("failed"), 0, tmp_path / "j.json", tmp_path / "log")
    assert ok.completed and not failed.completed
    assert failed.failed_activities == ["restart-load-balancer"]


def test_failures_are_excused_only_when_under_way_as_the_address_moved() -> None:
    """A failure whose request started at most ``in_flight`` seconds before the client first saw the
    address moved is the move's; one earlier, or with no move after it, is not. The first answer
    is no move."""
    from lbconform.chaos.traffic.recording import failures_away_from_moves

    doc = {"backend_changes": [[100.0, "a"], [110.0, "b"], [111.0, "a"]],
           "failures": [{"at": 99.5, "kind": "reset"}, {"at": 109.2, "kind": "timeout"},
                        {"at": 110.6, "kind": "reset"}, {"at": 108.5, "kind": "timeout"},
                        {"at": 111.5, "kind": "reset"}]}
    away = failures_away_from_moves(doc, in_flight=1.1)
    assert [f["at"] for f in away] == [99.5, 108.5, 111.5]
    assert failures_away_from_moves({"failures": doc["failures"][:1]}, 1.1) == doc["failures"][:1]
