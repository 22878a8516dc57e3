"""Node exclusion: a node labelled ``node.kubernetes.io/exclude-from-external-load-balancers``
(k8s.io/cloud-provider's contract, which MetalLB's speakers honour too) leaves every pool and
takes no new flows; once the label is gone it may take them again. The test labels a node, which
every Service in the cluster sees, so it runs alone."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService, NodeLabeler
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.target import EXCLUDE_LABEL, Target
from lbconform.traffic import checks
from lbconform.traffic.client import Client

pytestmark = [pytest.mark.features(Feature.NODE_EXCLUSION), pytest.mark.exclusive(from_first_change=True)]

#: New connections that must all avoid the excluded node's backend once its exclusion took effect.
CONNECTIONS = 30


def test_excluded_node_takes_no_new_flows(make_backends: MakeBackends, make_service: MakeService,
                                          label_node: NodeLabeler, client: Client, target: Target) -> None:
    """With a backend on every node and policy Local, a node labelled to be excluded (one whose
    backend answers) leaves the pool and its backend answers no new connection; once the label is
    removed, the node may serve again (where every node with a backend takes traffic, it does)."""
    backends = make_backends(tweaks.one_per_node, replicas=len(target.node_addresses()))
    lb = make_service(tweaks.traffic_policy_local)
    lb.must_be_node_pool()
    lb.wait_for_serving(backends)
    by_node = {n: {p["metadata"]["name"] for p in ps} for n, ps in backends.by_node().items()}
    answering = lb.answering_backends(backends)
    node = next(n for n, pods in sorted(by_node.items()) if pods & answering)
    undo = label_node(node, EXCLUDE_LABEL)
    lb.wait_for_serving(backends)
    answers = [checks.answer_or_failure(client, lb.vip, lb.port()) for _ in range(CONNECTIONS)]
    assert not by_node[node] & set(answers), f"new connections reached the excluded {node}: {answers}"
    assert set(answers) <= backends.names(), answers
    undo()
    lb.wait_for_serving(backends)
