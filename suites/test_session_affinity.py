"""Session affinity ClientIP: one client, one backend; switched on and off, it follows."""

from __future__ import annotations

import pytest

from fixtures.harness import MakeBackends, MakeService
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.lb import LoadBalancer
from lbconform.providers.base import NotSupported
from lbconform.traffic import checks
from lbconform.traffic.client import Client
from lbconform.wait import LbWaitTimeout, NotYet, poll_until

#: New connections of one client that must all reach the same backend; without affinity, over
#: three backends, all of them reach one by chance once in 3**19.
AFFINITY_CONNECTIONS = 20


def answered(client: Client, lb: LoadBalancer) -> list[str]:
    return [checks.answer_or_failure(client, lb.vip, lb.port()) for _ in range(AFFINITY_CONNECTIONS)]


def wait_for_backends_per_client(client: Client, lb: LoadBalancer, backends: set[str], one: bool,
                                 what: str) -> None:
    """Until ``AFFINITY_CONNECTIONS`` new connections all reach ``backends``: one of them (``one``),
    or more than one."""
    def holds() -> list[str] | NotYet:
        answers = answered(client, lb)
        ok = set(answers) <= backends and (len(set(answers)) == 1) == one
        return answers if ok else NotYet(sorted(set(answers)))

    poll_until(holds, timeout=lb.target.timeouts.lb_propagation, timeout_error=LbWaitTimeout,
               description=f"{AFFINITY_CONNECTIONS} new connections to reach {what}")


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
    answers = answered(client, lb)
    assert len(set(answers)) == 1 and answers[0] in backends.names(), answers


@pytest.mark.features(Feature.SESSION_AFFINITY)
def test_affinity_switched_on_and_off(make_backends: MakeBackends, make_service: MakeService,
                                      client: Client) -> None:
    """Under policy Local with a backend on every node, sessionAffinity None -> ClientIP brings one
    client's new connections to one backend, and ClientIP -> None spreads them again."""
    backends = make_backends(tweaks.one_per_node)
    lb = make_service(tweaks.traffic_policy_local)
    lb.wait_for_serving(backends)
    if len(lb.answering_backends(backends)) < 2:
        raise NotSupported("one announcing node takes a Local Service's traffic, so only its own backend "
                           "answers: switching affinity cannot show")
    lb.update(tweaks.session_affinity_client_ip)
    names = backends.names()
    wait_for_backends_per_client(client, lb, names, one=True, what="one backend (affinity on)")
    lb.update(tweaks.session_affinity_none)
    wait_for_backends_per_client(client, lb, names, one=False, what="more than one backend (affinity off)")
