"""The lab check ``lbconform run`` performs until the conformance suites exist.

It deploys upstream's agnhost behind a type=LoadBalancer Service with
externalTrafficPolicy=Local, then proves from the client namespace that every node's
NodePort reaches every backend and that kube-proxy's health check answers per node, and
removes what it made.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier, load_one
from lbconform.kube.rawapi import RawApi
from lbconform.lab import topology as topo
from lbconform.lab.cluster import Lab
from lbconform.lab.probe import http_status
from lbconform.wait import await_convergence, poll_until

Say = Callable[[str], None]

#: Every backend must have answered through a node's NodePort within this.
ALL_BACKENDS_SECONDS = 30.0


def check_node_ports(api: RawApi, namespace: str, nodes: list[topo.Node], say: Say) -> None:
    svc = api.get(f"/api/v1/namespaces/{namespace}/services/backend")
    port = int(svc["spec"]["ports"][0]["nodePort"])
    backends = {p["metadata"]["name"] for p in objects.pods(api, namespace, "app=backend")}
    for node in nodes:
        seen: set[str] = set()

        def answered(node: topo.Node = node, seen: set[str] = seen) -> bool:
            status, body = http_status(topo.CLIENT_NS, node.ip, port, "/hostname")
            if status == 200:
                seen.add(body.strip())
            return seen >= backends

        poll_until(answered, timeout=ALL_BACKENDS_SECONDS, interval=0.02,
                   description=f"all {len(backends)} backends to answer through {node.name}:{port}")
        say(f"{node.name}:{port} reaches all {len(backends)} backends")


def check_health_checks(api: RawApi, namespace: str, nodes: list[topo.Node], say: Say) -> None:
    svc = api.get(f"/api/v1/namespaces/{namespace}/services/backend")
    hc = int(svc["spec"]["healthCheckNodePort"])
    with_backend = {p["spec"]["nodeName"] for p in objects.pods(api, namespace, "app=backend")}
    for node in nodes:
        want = 200 if node.name in with_backend else 503

        def as_expected(node: topo.Node = node, want: int = want) -> bool:
            status, body = http_status(topo.CLIENT_NS, node.ip, hc, "/healthz")
            return status == want and json.loads(body)["service"]["name"] == "backend"

        await_convergence(as_expected, successes=3, timeout=15,
                          description=f"{node.name}'s health check on {hc} to answer {want}")
        say(f"{node.name} health check :{hc} answers {want}")


def run_smoke(lab: Lab, keep_lab: bool, say: Say) -> int:
    booted = False
    if not lab.dir.exists():
        report = lab.up()
        booted = True
        say(f"lab booted in {report.total:.1f}s")
    try:
        state = lab.dir.read()
        nodes = topo.nodes(state.nodes)
        api = lab.api()
        name = f"lbconform-run-{uuid.uuid4().hex[:6]}"
        owner = Applier(api, None, {"lbconform.io/run": name})
        owner.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        try:
            ns = Applier(api, name, {"lbconform.io/run": name})
            ns.create(load_one("backend-deployment", tweaks.replicas(max(1, len(nodes) - 1)),
                               tweaks.one_per_node))
            ns.create(load_one("backend-service", tweaks.traffic_policy_local))
            objects.wait_for_deployment(api, name, "backend")
            check_node_ports(api, name, nodes, say)
            check_health_checks(api, name, nodes, say)
        finally:
            ns.cleanup()
            owner.cleanup()
        print(f"lab check passed: {len(nodes)} nodes, NodePorts and health checks as kube-proxy serves them")
        return 0
    finally:
        if booted and not keep_lab:
            lab.down()
