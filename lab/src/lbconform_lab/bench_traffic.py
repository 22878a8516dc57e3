"""``lbconform bench traffic``: the traffic engines against a lab VIP, beside ``wrk`` on the
same target in the same run.

A benchmark, never a pass/fail test. It measures, from the lab's client namespace, how many
long-lived connections the fleet holds (against an aim of 10,000), how many new connections
per second and how many keep-alive requests per second the request loop completes, and the
same with Debian's ``wrk`` as the reference; it prints ratios (lbconform / wrk), and its last
line holds the figures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from lbconform.errors import LabError
from lbconform.kube import tweaks
from lbconform.kube.jig import ServiceJig
from lbconform.kube.manifests import Applier, load_one
from lbconform.kube.sweeper import RUN_LABEL
from lbconform.kube.workload import Workload
from lbconform.traffic.checks import wait_for_backends
from lbconform.traffic.client import Client
from lbconform.traffic.fleet import ALIVE, Fleet
from lbconform.traffic.requests import KEEP_ALIVE, NEW_CONNECTION, RequestLoop
from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab

Say = Callable[[str], None]

AIM_CONNECTIONS = 10_000
#: Setting up the target: backends rolled out, the VIP serving.
SETUP_SECONDS = 120.0
#: wrk must end on its own (-d) well within this.
WRK_GRACE_SECONDS = 60.0


@dataclass
class Figures:
    held: int = 0
    held_seconds: float = 0.0
    new_per_second: float = 0.0
    requests_per_second: float = 0.0


def _wrk(url: str, connections: int, seconds: int, close: bool) -> tuple[float, int]:
    """wrk from the client namespace: (requests per second, connect errors)."""
    argv = ["nsenter", f"--net=/var/run/netns/{topo.CLIENT_NS}", "wrk", "-t2", f"-c{connections}",
            f"-d{seconds}s", "--timeout", "3s"]
    if close:
        argv += ["-H", "Connection: close"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True,
                         timeout=seconds + WRK_GRACE_SECONDS).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Socket errors: connect (\d+)", out)
    return (float(rps.group(1)) if rps else 0.0), (int(errors.group(1)) if errors else 0)


def bench_traffic(connections: int, seconds: int, concurrency: int, say: Say) -> int:
    if shutil.which("wrk") is None:
        raise LabError("wrk is not installed (Debian package wrk): `make setup` installs it")
    lab = Lab(progress=say)
    booted = not lab.dir.exists()
    if booted:
        lab.up()
    api = lab.api()
    run = f"bench-{uuid.uuid4().hex[:6]}"
    owner = Applier(api, None, {RUN_LABEL: run})
    owner.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}})
    ns = Applier(api, run, {RUN_LABEL: run})
    try:
        obj = ns.create(load_one("backend-deployment", tweaks.replicas(3), tweaks.one_per_node))
        backends = Workload(ns, obj["kind"], obj["metadata"]["name"])
        backends.wait_rolled_out(SETUP_SECONDS)
        jig = ServiceJig(ns)
        jig.create()
        vip = jig.wait_for_load_balancer(SETUP_SECONDS)
        wait_for_backends(Client(topo.CLIENT_NS), vip, 80, backends.names(), SETUP_SECONDS)
        say(f"target: {vip}:80, 3 agnhost backends behind the reference LB (node mode)")
        ours, ref = _measure(vip, connections, seconds, concurrency, say)
    finally:
        ns.cleanup()
        owner.cleanup()
        if booted:
            lab.down()
    print(f"{'':24s}{'lbconform':>12s}{'wrk':>12s}{'ratio':>8s}")
    print(f"{'connections held':24s}{ours.held:>12d}{ref.held:>12d}{ours.held / max(ref.held, 1):>8.2f}")
    for name, a, b in (("new connections/s", ours.new_per_second, ref.new_per_second),
                       ("requests/s keep-alive", ours.requests_per_second, ref.requests_per_second)):
        print(f"{name:24s}{a:>12.0f}{b:>12.0f}{a / b if b else 0:>8.2f}")
    print(f"traffic bench: held {ours.held}/{connections} connections in {ours.held_seconds:.1f}s "
          f"({ours.held / AIM_CONNECTIONS:.2f} x the {AIM_CONNECTIONS} aim), new connections/s "
          f"{ours.new_per_second:.0f} ({ours.new_per_second / max(ref.new_per_second, 1):.2f} x wrk), "
          f"keep-alive requests/s {ours.requests_per_second:.0f} "
          f"({ours.requests_per_second / max(ref.requests_per_second, 1):.2f} x wrk)")
    return 0


def _measure(vip: str, connections: int, seconds: int, concurrency: int, say: Say) -> tuple[Figures, Figures]:
    ours, ref = Figures(), Figures()
    start = time.monotonic()
    with Fleet(vip, 80, topo.CLIENT_NS, timeout=10) as fleet:
        fleet.open(connections)
        ours.held_seconds = time.monotonic() - start
        fleet.request()
        ours.held = sum(1 for c in fleet.connections if c.outcome == ALIVE)
    say(f"fleet: {ours.held}/{connections} connections held and answering ({fleet.outcomes()})")
    _, errors = _wrk(f"http://{vip}/hostname", connections, 5, close=False)
    ref.held = connections - errors
    say(f"wrk: {ref.held}/{connections} connections opened")
    new = RequestLoop(vip, 80, topo.CLIENT_NS, variant=NEW_CONNECTION).run_closed(concurrency, seconds)
    ours.new_per_second = new.outcomes["ok"] / (new.ended - new.started)
    ref.new_per_second, _ = _wrk(f"http://{vip}/hostname", concurrency, seconds, close=True)
    keep = RequestLoop(vip, 80, topo.CLIENT_NS, variant=KEEP_ALIVE).run_closed(concurrency, seconds)
    ours.requests_per_second = keep.outcomes["ok"] / (keep.ended - keep.started)
    ref.requests_per_second, _ = _wrk(f"http://{vip}/hostname", concurrency, seconds, close=False)
    say(f"failures: new-connection loop {new.failure_kinds()}, keep-alive loop {keep.failure_kinds()}")
    return ours, ref
