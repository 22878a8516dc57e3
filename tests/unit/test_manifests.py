"""Manifests load from manifests/ and tweaks change exactly what they name."""

from __future__ import annotations

import pytest

from lbconform.kube import tweaks
from lbconform.kube.manifests import kind_of, load, load_one
from lbconform.kube.workload import QUIET_CONFIG_MAP, QUIET_PROGRAM, quiet_server_config_map


def test_backend_manifests_load() -> None:
    dep = load_one("backend-deployment")
    svc = load_one("backend-service.yaml")
    assert dep["kind"] == "Deployment" and svc["spec"]["type"] == "LoadBalancer"
    assert kind_of(dep).collection("ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert kind_of({"kind": "Namespace"}).collection("ns") == "/api/v1/namespaces"


def test_the_quiet_backend_runs_its_program_from_the_config_map_the_harness_makes() -> None:
    dep = load_one("backend-quiet-deployment", tweaks.delay_shutdown(3))
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = container["volumeMounts"][0]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == QUIET_CONFIG_MAP
    program = container["command"][1]
    assert program == f"{mount['mountPath']}/{QUIET_PROGRAM}"
    assert container["args"] == ["--http-port=8080", "--delay-shutdown=3"]
    assert dep["spec"]["selector"] == load_one("backend-deployment")["spec"]["selector"]
    config_map = quiet_server_config_map()
    assert config_map["metadata"]["name"] == QUIET_CONFIG_MAP
    assert "SO_KEEPALIVE, 0" in config_map["data"][QUIET_PROGRAM]


def test_termination_tweaks() -> None:
    dep = load_one("backend-deployment", tweaks.pre_stop_sleep(4), tweaks.delay_shutdown(2),
                   tweaks.delay_shutdown(3), tweaks.grace_period(9), tweaks.replicas(1))
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["lifecycle"]["preStop"] == {"sleep": {"seconds": 4}}
    assert [a for a in c["args"] if a.startswith("--delay-shutdown")] == ["--delay-shutdown=3"]
    assert pod["terminationGracePeriodSeconds"] == 9
    assert dep["spec"]["replicas"] == 1


def test_service_tweaks_leave_other_kinds_alone() -> None:
    dep, svc = load("backend-deployment")[0], load("backend-service")[0]
    for obj in (dep, svc):
        tweaks.traffic_policy_local(obj)
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    assert "externalTrafficPolicy" not in dep["spec"]
    tweaks.service_type("NodePort")(svc)
    assert svc["spec"]["type"] == "NodePort" and "externalTrafficPolicy" not in svc["spec"]


def test_one_per_node_uses_the_pod_labels() -> None:
    dep = load_one("backend-deployment", tweaks.one_per_node)
    term = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchLabels"] == {"app": "backend"}


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="CronJob"):
        kind_of({"kind": "CronJob"})
