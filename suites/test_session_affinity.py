"""Session affinity ClientIP: one client, one backend."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.traffic import checks
from lbconform.traffic.client import Client

#: New connections of one client that must all reach the same backend.
AFFINITY_CONNECTIONS = 20


@pytest.mark.features(Feature.SESSION_AFFINITY)
@pytest.mark.parametrize("policy", ["Cluster", "Local"])
def test_client_ip_affinity_keeps_one_backend(make_backends: MakeBackends, make_service: MakeService,
                                              client: Client, policy: str) -> None:
    """With sessionAffinity ClientIP, every new connection of one client reaches the same backend.
    Under Local each node's kube-proxy can only pick its own backend, so one backend means the LB
    itself kept the client on one node; under Cluster, kube-proxy's own ClientIP affinity on each
    node may pick the same backend by chance (one in nine with three), whatever the LB does."""
    backends = make_backends(tweaks.one_per_node)
    lb = make_service(tweaks.session_affinity_client_ip, tweaks.traffic_policy(policy))
    lb.wait_for_settled_pool(backends)
    checks.wait_for_reachable(client, lb.vip, lb.port(), backends.names(), lb.target.timeouts.lb_propagation)
    answers = [checks.answer_or_failure(client, lb.vip, lb.port()) for _ in range(AFFINITY_CONNECTIONS)]
    assert len(set(answers)) == 1 and answers[0] in backends.names(), answers
