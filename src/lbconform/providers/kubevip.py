"""The provider of kube-vip (services mode, ARP): the pool is the node that holds the Service's
election.

kube-vip-cloud-provider gives a Service its address (annotation ``kube-vip.io/loadbalancerIPs``
and ``spec.loadBalancerIP``); kube-vip, with ``svc_election``, runs one leader election per
Service: a ``coordination.k8s.io`` Lease named ``kubevip-<service>`` in the Service's namespace,
held by a node name (upstream ``pkg/lease/lease.go``, ``pkg/election/election.go``). The holder
adds the address to its interface (its kernel answers ARP), sends gratuitous ARP every 3 s, and
writes the ingress status and the ``kube-vip.io/vipHost`` annotation. The pool here is that
node, at its InternalIP, with ``healthy`` None: kube-vip probes nothing.

Who may stand: under externalTrafficPolicy Cluster every node, once the Service has an
endpoint; under Local only nodes with a serving local endpoint, and a node that loses its last
one gives the lease up at once. A Service with no endpoint gets no announcement and no ingress
status.

Declared Local move gap: "serving" is the EndpointSlice condition
(``pkg/endpoints/providers/endpointslices.go``), the one kube-proxy forwards by, so the holder
lets go exactly when its node stops forwarding. The next node takes the released Lease on its
next retry (up to 2 x 2.2 s) and the client learns of it on that node's next gratuitous ARP
(every 3 s; kube-vip sends none when it takes a Lease, ``pkg/arp/arp.go``): up to 7.4 s in which
the address leads to a node with nowhere to send. So kube-vip does not claim that pods can be
replaced behind a Local Service without failures, whatever their termination ordering.

Features it does not claim, and why:

- ``HealthCheckTransitions``: no health checks; it follows EndpointSlices (as above).
- ``IdleTimeout``: it forwards nothing (kube-proxy does); flows are the node's conntrack entries.
- ``PodBackendPool``: traffic always lands on a node.
- ``NodeExclusion``: v1.2.2 does not read ``node.kubernetes.io/exclude-from-external-load-balancers``
  (no mention of it in its source); any node may win a Service's election.

Declared failover: a dead holder keeps the Lease until it expires; a candidate takes it within
the lease duration plus the retry period's jittered wait (client-go leaderelection, jitter 1.2),
then announces on kube-vip's next ARP tick. With the DaemonSet ``kube-vip manifest`` writes
(``vip_leaseduration=15``, ``vip_retryperiod=2``, ``vip_arpRate`` 3000 ms by default) that is
15 + 2 x 2.2 + 3 = 22.4 s.

Options (``--provider-option NAME=VALUE``): ``lease-prefix``, the Lease name before the Service's
(default ``kubevip-``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

from lbconform.config import Timeouts
from lbconform.features import Feature
from lbconform.kube.rawapi import ApiError
from lbconform.providers.announcer import Announcer
from lbconform.providers.base import Declared, PoolMember, ServiceRef
from lbconform.providers.support import cluster_nodes, require_api

#: The election's timers in the DaemonSet ``kube-vip manifest daemonset`` writes (v1.2.2), and
#: kube-vip's default gratuitous-ARP period.
LEASE_DURATION_SECONDS: Final = 15.0
RETRY_PERIOD_SECONDS: Final = 2.0
ARP_PERIOD_SECONDS: Final = 3.0
#: client-go leaderelection's jitter on the retry period.
RETRY_JITTER: Final = 1.2
#: A released Lease is taken on a candidate's next retry and announced on its next ARP tick.
LOCAL_MOVE_SECONDS: Final = RETRY_PERIOD_SECONDS * (1 + RETRY_JITTER) + ARP_PERIOD_SECONDS
NODE_FAILOVER_SECONDS: Final = LEASE_DURATION_SECONDS + LOCAL_MOVE_SECONDS
LEASE_PREFIX: Final = "kubevip-"


def holder(lease: Mapping[str, Any]) -> str:
    """The node a Lease names as its holder ("" when none)."""
    return str(lease.get("spec", {}).get("holderIdentity") or "")


class KubeVipProvider(Announcer):
    name = "kube-vip"
    options_help: ClassVar[Mapping[str, str]] = {
        "lease-prefix": "the per-Service Lease's name before the Service's (default kubevip-)"}

    def features(self) -> set[Feature]:
        # LoadBalancerRestart: no hook restarts kube-vip's cloud provider and DaemonSet yet.
        return super().features() - {Feature.NODE_EXCLUSION, Feature.LOAD_BALANCER_RESTART}

    def declared(self) -> Declared:
        return self.declared_for("Local")

    def declared_for(self, external_traffic_policy: str) -> Declared:
        gap = LOCAL_MOVE_SECONDS if external_traffic_policy == "Local" else 0.0
        return self.announcing(
            NODE_FAILOVER_SECONDS, cleanup_finalizer=True, local_move_gap=gap,
            notes={"source": "kube-vip.io (services, ARP) and its cloud provider: address assignment, "
                             "one elected node per Service; no health checks, no connection tracking",
                   "failover": "the dead holder's Lease expires (15 s), a candidate takes it within "
                               "2 x 2.2 s and announces on the next 3 s ARP tick",
                   "entry": "one node per address, the holder of the Service's Lease, whose kernel "
                            "answers ARP for it",
                   "finalizer": "kube-vip-cloud-provider's service controller (k8s.io/cloud-provider) "
                                "holds service.kubernetes.io/load-balancer-cleanup",
                   "local_move": "the holder releases the Lease when its node's last endpoint stops "
                                 "serving; the next takes it on a 2 x 2.2 s retry and announces on "
                                 "its next 3 s ARP tick"})

    def timeouts(self) -> Timeouts:
        # The cloud provider assigns, an election runs, the holder writes the status; a dead
        # holder is replaced after its lease expires (22.4 s).
        return Timeouts(lb_create=60, lb_propagation=60, lb_delete=60, endpoint_lag=30,
                        health_transition=30, rollout=180, namespace_delete=180, request=5)

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        api = require_api(self.api, self.name, "the per-Service Lease of kube-vip's election")
        prefix = self.option("lease-prefix", "KUBE_VIP_LEASE_PREFIX", default=LEASE_PREFIX)
        try:
            lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{service.namespace}/leases/"
                            f"{prefix}{service.name}")
        except ApiError as exc:
            if exc.status == 404:  # no election yet: no endpoint, or not kube-vip's Service
                return []
            raise
        node = holder(lease)
        if not node:
            return []
        return [PoolMember(address=cluster_nodes(api).ip_by_name.get(node, ""), healthy=None, name=node)]
