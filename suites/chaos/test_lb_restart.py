"""The load balancer's own control plane restarting under load, as an upgrade or a crash restarts
it: its controller, and its per-node agents one node at a time (MetalLB's speakers). Its data plane
runs on meanwhile, and the new processes take over from what the old ones left. No new connection
fails, no established one is reset, and the Service keeps its address."""

from __future__ import annotations

import pytest

from fixtures.chaos import RunExperiment
from fixtures.harness import MakeBackends, MakeFleet, MakeService, Measure
from lbconform.chaos.lb.actions import PARTS
from lbconform.chaos.traffic.recording import failures_away_from_moves
from lbconform.features import Feature
from lbconform.kube import tweaks
from lbconform.providers.base import NotSupported
from lbconform.target import Target
from lbconform.traffic.fleet import KeepAlive

#: Restarting the controller changes what every test of the cluster sees: the test has it alone.
pytestmark = [pytest.mark.features(Feature.LOAD_BALANCER_RESTART), pytest.mark.disruptive,
              pytest.mark.exclusive, pytest.mark.xdist_group("chaos")]

#: New connections per second through the experiment, and the seconds of traffic before the restart.
RATE = 20
WARMUP_SECONDS = 5
#: Traffic in all, by part restarted: the restart and the new processes' first checks of the
#: backends fall within it (a DaemonSet's rollout waits for each node's new pod to be ready:
#: MetalLB's three speakers roll in about 32 s in the lab, and the test fails a restart that ends
#: after the traffic).
TRAFFIC_SECONDS = {"controller": 25, "node-agents": 55}
#: Connections opened before the restart, each sending one more request after it.
ESTABLISHED = 20
#: And each sending a keepalive probe every second meanwhile, so that a path that moves under them
#: during the restart meets them there (a probe that reaches a node without the flow's conntrack
#: entry is answered with a reset), where idle connections would notice only a move that lasted;
#: ten unanswered probes in a row end a connection, as ten seconds with no path would.
SENDING = KeepAlive(idle=1, interval=1, count=10)
ZERO = [0, 0]
#: A request slower than this fails: a connection whose SYN the LB dropped is sent again after
#: 1 s, so the recorder's usual 3 s would hide an outage of up to 2 s (what a controller that
#: forgot its backends' health costs until its first checks pass again).
REQUEST_TIMEOUT = 1.0
#: How long the address is watched after the restart: a controller that gives the Service a new
#: address does so when it first handles it.
ADDRESS_WATCH_SECONDS = 3.0
#: Where the implementation declares that the restart moves the address, how long before the
#: client first sees it moved a failed new connection may have started and still have been under
#: way when it moved (the request's own timeout, and the next request's start after the move).
IN_FLIGHT_SECONDS = REQUEST_TIMEOUT + 2 / RATE


def anything(part: str, moves: bool) -> list[int]:
    """The experiment's tolerance: none, unless the restart moves the address as declared; then
    the test judges each failure by when it happened."""
    return [0, RATE * TRAFFIC_SECONDS[part]] if moves else ZERO


@pytest.mark.parametrize("part", PARTS)
def test_restart_under_load_fails_no_request(
        part: str, make_backends: MakeBackends, make_service: MakeService, make_fleet: MakeFleet,
        experiment: RunExperiment, target: Target, measure: Measure) -> None:
    """The implementation's controller, or its per-node agents (rolled one node at a time, the
    announcing node's among them), restarted while traffic flows fail no new connection (none
    takes over a second), reset none of the connections established before (each sending every
    second throughout), and leave the Service its address; the restart ends while the traffic
    still runs. Where the implementation declares that its agents' restart moves the address to
    another node and back, the connections that send while it moves are not held to that restart:
    neither the established ones nor a new one under way at a move (the client sees a move as a
    change of the backend that answers); every other new connection is, and the address (not
    supported, with the reason, once those have passed).
    externalTrafficPolicy Local, with backends on every node but one: a restarted controller that
    forgot which nodes pass their checks fails new connections whether it sends them nowhere or
    everywhere."""
    moves = False
    if part == "node-agents":
        target.provider.node_agents()  # NotSupported where the implementation runs none
        moves = target.provider.declared_for("Local").agent_restart_moves_address
    spared = sorted(target.node_addresses())[-1]
    backends = make_backends(tweaks.avoid_node(spared), replicas=2)
    lb = make_service(tweaks.traffic_policy_local)
    lb.wait_for_serving(backends)
    vip = lb.vip
    fleet = make_fleet(lb, ESTABLISHED, keepalive=SENDING)
    run = experiment("lb-restart", namespace=lb.namespace, service=lb.name, allow_disruptive=True,
                     restart_part=part, traffic_rate=RATE, warmup_seconds=WARMUP_SECONDS,
                     traffic_seconds=TRAFFIC_SECONDS[part], traffic_request_timeout=REQUEST_TIMEOUT,
                     failure_tolerance=anything(part, moves), reset_tolerance=anything(part, moves))
    label = part.replace("-", "_")
    measure(f"lb_restart_{label}_failed_requests", float(run.traffic["failed"]), "requests")
    assert run.run.completed, run.describe()
    at_moves = 0
    if moves:  # the new connections under way when the address moved are the declared move's
        away = failures_away_from_moves(run.traffic, IN_FLIGHT_SECONDS)
        assert not away, (f"{len(away)} new connections failed that no move of the address explains "
                          f"(the first: {away[:3]}): {run.describe()}")
        at_moves = run.traffic["failed"]
    traffic_end = run.traffic["started"] + TRAFFIC_SECONDS[part]
    restarted = run.ended("restart-load-balancer")
    assert restarted <= traffic_end, f"the restart ended {restarted - traffic_end:.1f}s after the traffic"
    after = fleet.request()
    measure(f"lb_restart_{label}_established_ended", ESTABLISHED - after.get("alive", 0), "connections")
    address = lb.jig.ingress_over(ADDRESS_WATCH_SECONDS, expect=vip)
    assert address == vip, f"the address {vip} became {address} after the restart"
    if moves:
        raise NotSupported(
            f"the {target.provider.name} provider declares that restarting {target.provider.node_agents()} "
            "moves a Service's address to another node and back, which resets the connections that send "
            f"meanwhile (after the restart: {after}; new connections under way at a move that failed: "
            f"{at_moves}); no other new connection failed and the address stayed")
    ended = sorted((c.ended_at - run.traffic["started"], c.error) for c in fleet.connections if c.ended_at)
    assert after == {"alive": ESTABLISHED}, (
        f"connections established before the restart, after it: {after}; the first ended "
        f"(seconds into the traffic, error): {ended[:3]}")
