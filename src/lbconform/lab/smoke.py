"""The lab check ``lbconform run`` performs until the conformance suites exist.

It deploys upstream's agnhost on all nodes but one, behind two type=LoadBalancer Services:
one with externalTrafficPolicy=Cluster, whose NodePort on every node and whose VIP must reach
every backend, and one with Local, whose health check port must answer 200 exactly on the
nodes with a backend and whose VIP must show the client's own address. Then it removes what
it made.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from lbconform.kube import objects, tweaks
from lbconform.kube.jig import ServiceJig
from lbconform.kube.manifests import Applier, load_one
from lbconform.lab import topology as topo
from lbconform.lab.cluster import Lab
from lbconform.lab.probe import http_status, wait_for_all_backends
from lbconform.wait import await_convergence

Say = Callable[[str], None]

#: Every backend must have answered through a node's NodePort within this.
ALL_BACKENDS_SECONDS = 30.0
#: kube-proxy serves a Service's health check port a sync period after the slice changed.
HEALTH_CHECK_SECONDS = 15.0


def check_cluster_policy(jig: ServiceJig, nodes: list[topo.Node], say: Say) -> None:
    api, namespace = jig.applier.api, str(jig.applier.namespace)
    port = int(jig.get()["spec"]["ports"][0]["nodePort"])
    backends = {p["metadata"]["name"] for p in objects.pods(api, namespace, "app=backend")}
    for node in nodes:
        wait_for_all_backends(node.ip, port, backends, ALL_BACKENDS_SECONDS)
        say(f"{node.name}:{port} reaches all {len(backends)} backends")
    vip = jig.wait_for_load_balancer(ALL_BACKENDS_SECONDS)
    wait_for_all_backends(vip, 80, backends, ALL_BACKENDS_SECONDS)
    say(f"VIP {vip} (externalTrafficPolicy=Cluster) reaches all {len(backends)} backends")


def check_local_policy(jig: ServiceJig, nodes: list[topo.Node], say: Say) -> None:
    api, namespace = jig.applier.api, str(jig.applier.namespace)
    svc = jig.get()
    hc = int(svc["spec"]["healthCheckNodePort"])
    with_backend = {p["spec"]["nodeName"] for p in objects.pods(api, namespace, "app=backend")}
    for node in nodes:
        want = 200 if node.name in with_backend else 503

        def as_expected(node: topo.Node = node, want: int = want) -> bool:
            status, body = http_status(topo.CLIENT_NS, node.ip, hc, "/healthz")
            return status == want and json.loads(body)["service"]["name"] == "local"

        await_convergence(as_expected, successes=3, timeout=HEALTH_CHECK_SECONDS,
                          description=f"{node.name}'s health check on {hc} to answer {want}")
        say(f"{node.name} health check :{hc} answers {want}")
    vip = jig.wait_for_load_balancer(ALL_BACKENDS_SECONDS)

    def client_ip_kept() -> bool:
        status, body = http_status(topo.CLIENT_NS, vip, 80, "/clientip")
        return status == 200 and body.rsplit(":", 1)[0] == topo.CLIENT_IP

    await_convergence(client_ip_kept, successes=3, timeout=ALL_BACKENDS_SECONDS,
                      description=f"VIP {vip} to answer with the client's own address")
    say(f"VIP {vip} (externalTrafficPolicy=Local) keeps the client address {topo.CLIENT_IP}")


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
            cluster, local = ServiceJig(ns, "cluster"), ServiceJig(ns, "local")
            cluster.create()
            local.create(tweaks.traffic_policy_local)
            objects.wait_for_deployment(api, name, "backend")
            check_cluster_policy(cluster, nodes, say)
            check_local_policy(local, nodes, say)
        finally:
            ns.cleanup()
            owner.cleanup()
        print(f"lab check passed: {len(nodes)} nodes; NodePorts, health checks and VIPs "
              "of both traffic policies behave")
        return 0
    finally:
        if booted and not keep_lab:
            lab.down()
