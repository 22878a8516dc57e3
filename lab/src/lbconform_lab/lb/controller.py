"""The reference LB's controller: Services in, VIPs, status and nftables rules out.

One reconcile pass looks at every Service of type LoadBalancer of its class, as the
cloud-provider service controller does: it assigns and keeps a VIP, keeps the cleanup
finalizer, writes ``status.loadBalancer``, computes the pool, runs the health checks,
and programs the data plane. Removing a backend drains its pinned flows or forgets them,
as the Service asks. Defects apply lab-wide, or only to the Services of one harness run (those
labelled ``lbconform.io/run`` with its id), so that runs proving different defects can share
one lab at the same time.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbconform.kube.informer import Informer
from lbconform.kube.jig import CLEANUP_FINALIZER
from lbconform.kube.rawapi import MERGE, ApiError, Json, RawApi
from lbconform.kube.sweeper import RUN_LABEL
from lbconform_lab import topology as topo
from lbconform_lab.lb import nft, plan
from lbconform_lab.lb.health import Checker, Health
from lbconform_lab.lb.params import (
    DEFECTS,
    LB_CLASS,
    SERIAL_PROVISIONING_SECONDS,
    SLOW_REGISTRATION_SECONDS,
    SLOW_UNHEALTHY_SECONDS,
    Params,
    ip_mode,
    parse,
)

log = logging.getLogger(__name__)

#: A reconcile pass runs at most every MIN_PASS_SECONDS, and at least every MAX_PASS_SECONDS
#: without events: time-based decisions (pool batching, the slow-unhealthy and serial-provisioning
#: defects) are taken on those passes, so they are late by at most MAX_PASS_SECONDS.
MIN_PASS_SECONDS = 0.05
MAX_PASS_SECONDS = 0.5
#: A pass longer than this is logged: every Service waits for it.
SLOW_PASS_SECONDS = 1.0


@dataclass
class ServiceState:
    """What the LB holds for one Service."""

    key: str
    uid: str
    vip: str
    index: int
    params: Params = field(default_factory=Params)
    #: The defects this Service meets: the lab-wide ones and its run's.
    defects: frozenset[str] = frozenset()
    pool: dict[str, plan.Backend] = field(default_factory=dict)
    checkers: dict[str, Checker] = field(default_factory=dict)
    healthy: list[str] = field(default_factory=list)
    health_changed: dict[str, float] = field(default_factory=dict)
    pending_pool: dict[str, plan.Backend] | None = None
    pending_since: float = 0.0
    ever_seen: dict[str, plan.Backend] = field(default_factory=dict)
    #: When (monotonic) each backend joined the pool of the already provisioned Service (the
    #: slow-registration defect holds it back for a while); backends of the first pool are not in it.
    joined: dict[str, float] = field(default_factory=dict)
    #: Each backend's first health check (the stale-health-check defect keeps it).
    first_health: dict[str, plan.HealthTarget | None] = field(default_factory=dict)
    #: The Service's ports when it was provisioned (the ignore-updates defect keeps them).
    first_ports: list[Json] = field(default_factory=list)
    #: The harness run the Service belongs to ("" for none), and its spec as last seen (the
    #: move-ip-on-update defect gives a new address when it changes; Services have no
    #: ``metadata.generation``).
    run: str = ""
    spec: Json = field(default_factory=dict)
    #: The rules last rendered for it (the keep-deleted-vip defect goes on rendering them).
    last_plan: plan.ServicePlan | None = None
    #: The (protocol, port) pairs it listens on: the flows of a port that goes are forgotten.
    listeners: frozenset[tuple[str, int]] = frozenset()
    counters: dict[str, int] = field(default_factory=lambda: {
        "poolChanges": 0, "healthySetChanges": 0, "flowsForgotten": 0, "reconciles": 0})

    def health(self, key: str) -> Health | None:
        c = self.checkers.get(key)
        return c.state if c else None


def wants_lb(svc: Json, defects: frozenset[str] = frozenset()) -> bool:
    """Whether the LB serves this Service: of type LoadBalancer, without a class or of its own."""
    spec = svc["spec"]
    own_class = spec.get("loadBalancerClass") in (None, LB_CLASS) or "ignore-class" in defects
    return bool(spec.get("type") == "LoadBalancer" and own_class)


def run_of(svc: Json) -> str:
    """The harness run a Service belongs to (its ``lbconform.io/run`` label), "" for none."""
    return str((svc["metadata"].get("labels") or {}).get(RUN_LABEL) or "")


class Controller:
    """The reference LB's control loop. With a ``state_file`` it saves what a restarted process
    needs and cannot read back from the cluster (its defects, the healthy backends, where the next
    address search starts) and starts from it: a restart changes no address and fails no flow."""

    def __init__(self, api: RawApi, default_mode: str, defects: set[str],
                 state_file: Path | None = None) -> None:
        unknown = set(defects) - set(DEFECTS)
        if unknown:
            raise ValueError(
                f"unknown LB defect(s) {', '.join(sorted(unknown))}: known are {', '.join(DEFECTS)}")
        self.api = api
        self.default_mode = default_mode
        self.defects: frozenset[str] = frozenset(defects)
        #: Defects of one harness run: run id -> defects.
        self.run_defects: dict[str, frozenset[str]] = {}
        self.dirty = threading.Event()
        #: Set once the first reconcile pass has rendered the rules.
        self.ready = threading.Event()
        self.lock = threading.RLock()
        self.services: dict[str, ServiceState] = {}
        #: Deleted Services whose rules the keep-deleted-vip defect keeps, by key.
        self.ghosts: dict[str, ServiceState] = {}
        #: UIDs of Services released because their type changed (the no-reprovision defect
        #: never provisions them again).
        self.released: set[str] = set()
        self.timeouts: set[tuple[int, str]] = set()
        self.ruleset = ""
        #: Flows to forget once this pass's ruleset is in (``_forget_flows``): (Service, argv).
        self.forgets: list[tuple[ServiceState, list[str], str]] = []
        self.routed_nodes: dict[int, str] = {}
        #: Where the next VIP search starts (an index into VIP_CIDR's hosts).
        self.next_vip = 0
        #: When the serial-provisioning defect last let a new Service of a run through: run -> time.
        self.serial_last: dict[str | None, float] = {}
        self.state_file = state_file
        self.saved: Json = {}
        #: The healthy backends the process before this one saved, by Service key: (uid, backend
        #: keys). Their first checkers start healthy; each entry is used by one pass and dropped.
        self.warm: dict[str, tuple[str, set[str]]] = {}
        #: This process's own hash salt, used only under the rehash-on-restart defect.
        self.salt = int.from_bytes(os.urandom(4), "big")
        self._load()
        self.svc_informer = Informer(api, "/api/v1/services", self._changed)
        self.slice_informer = Informer(api, "/apis/discovery.k8s.io/v1/endpointslices", self._changed)
        self.node_informer = Informer(api, "/api/v1/nodes", self._changed)

    def _changed(self, kind: str, obj: Json) -> None:
        self.dirty.set()

    # --- runtime control -------------------------------------------------------------------
    def set_defects(self, defects: set[str], run: str | None = None) -> None:
        """Switch the lab-wide defects, or (with ``run``) those of one run's Services."""
        unknown = set(defects) - set(DEFECTS)
        if unknown:
            raise ValueError(f"unknown LB defect(s): {', '.join(sorted(unknown))}")
        with self.lock:
            if run is None:
                self.defects = frozenset(defects)
            elif defects:
                self.run_defects[run] = frozenset(defects)
            else:
                self.run_defects.pop(run, None)
            self._save()
        self.dirty.set()

    def defects_for(self, svc: Json) -> frozenset[str]:
        return self.defects_of_run(run_of(svc))

    def defects_of_run(self, run: str) -> frozenset[str]:
        return self.defects | self.run_defects.get(run, frozenset())

    def run(self) -> None:
        for inf in (self.svc_informer, self.slice_informer, self.node_informer):
            inf.start()
        for inf in (self.svc_informer, self.slice_informer, self.node_informer):
            inf.synced.wait()
        while True:
            self.dirty.wait(MAX_PASS_SECONDS)
            self.dirty.clear()
            started = time.monotonic()
            try:
                self.reconcile()
            except Exception:
                log.exception("reconcile failed")
            took = time.monotonic() - started
            if took > SLOW_PASS_SECONDS:
                log.warning("a reconcile pass took %.2f s (%d Services)", took, len(self.services))
            time.sleep(MIN_PASS_SECONDS)

    # --- one pass --------------------------------------------------------------------------
    def reconcile(self) -> None:
        with self.lock:
            nodes = plan.node_infos(self.node_informer.snapshot())
            self._route_nodes(nodes)
            slices: dict[str, list[Json]] = {}
            for s in self.slice_informer.snapshot():
                owner = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
                if owner:
                    slices.setdefault(f"{s['metadata']['namespace']}/{owner}", []).append(s)
            plans = []
            seen = set()
            for svc in self.svc_informer.snapshot():
                key = Informer.key(svc)
                if svc["metadata"].get("deletionTimestamp") or not wants_lb(svc, self.defects_for(svc)):
                    self._release(svc)
                    continue
                seen.add(key)
                p = self._ensure(svc, slices.get(key, []), nodes)
                if p is not None:
                    plans.append(p)
            for key in list(self.services):
                if key not in seen:
                    self._forget(key)
            plans += self._ghost_plans()
            ruleset = nft.render(sorted(plans, key=lambda p: p.index), self.timeouts)
            if ruleset != self.ruleset:
                nft.apply(ruleset)
                self.ruleset = ruleset
            self._run_forgets()
            self.warm.clear()
            self._save()
            self.ready.set()

    # --- across restarts -------------------------------------------------------------------
    def _saved_state(self) -> Json:
        return {"defects": sorted(self.defects),
                "runDefects": {run: sorted(d) for run, d in sorted(self.run_defects.items())},
                "nextVip": self.next_vip,
                "healthy": {k: {"uid": s.uid, "backends": sorted(s.healthy)}
                            for k, s in sorted(self.services.items())}}

    def _save(self) -> None:
        """Write the saved state when it changed, whole (a temporary file renamed)."""
        if self.state_file is None:
            return
        doc = self._saved_state()
        if doc != self.saved:
            tmp = self.state_file.with_name(self.state_file.name + ".tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.state_file)
            self.saved = doc

    def _load(self) -> None:
        """Start from the state the process before this one saved, if any: its defects replace
        those of the command line, which were the lab's at boot."""
        if self.state_file is None or not self.state_file.exists():
            return
        doc = json.loads(self.state_file.read_text())
        self.defects = frozenset(doc["defects"]) & frozenset(DEFECTS)
        self.run_defects = {run: frozenset(d) & frozenset(DEFECTS) for run, d in doc["runDefects"].items()}
        self.next_vip = int(doc["nextVip"])
        self.warm = {k: (v["uid"], set(v["backends"])) for k, v in doc["healthy"].items()}
        self.saved = doc
        log.info("restarted: %d Services' healthy backends, defects %s, run defects %s", len(self.warm),
                 sorted(self.defects), {r: sorted(d) for r, d in self.run_defects.items()})

    def _route_nodes(self, nodes: list[plan.NodeInfo]) -> None:
        """Policy routing for passthrough: fwmark of node K -> table K -> VIPs via node K. A rule a
        process before this one added stays: taken away for a moment, it would drop the packets
        of every flow to that node."""
        for n in nodes:
            if self.routed_nodes.get(n.index) == n.ip:
                continue
            mark = plan.MARK_BASE + n.index
            rule = ["fwmark", hex(mark), "lookup", str(mark)]
            there = subprocess.run(["ip", "rule", "show", *rule], capture_output=True, text=True, check=False)
            if not there.stdout.strip():
                subprocess.run(["ip", "rule", "add", *rule], check=True)
            subprocess.run(["ip", "route", "replace", topo.VIP_CIDR, "via", n.ip, "table", str(mark)],
                           check=True)
            self.routed_nodes[n.index] = n.ip

    def _allocate_vip(self, svc: Json, fresh: bool = False) -> str | None:
        """The Service's address: the one it asks for or already has, else the next free one
        outside the addresses held for requests (``fresh``: the next free one whatever it has, for
        the move-ip-on-update defect; the ignore-requested-ip defect does not hear the request)."""
        used = {s.vip for s in (*self.services.values(), *self.ghosts.values())}
        network = ipaddress.ip_network(topo.VIP_CIDR)
        hears = "ignore-requested-ip" not in self.defects_for(svc)
        requested = svc["spec"].get("loadBalancerIP") if hears else None
        wanted = None if fresh else requested or next(
            (i.get("ip") for i in svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []), None)
        if wanted:
            if ipaddress.ip_address(wanted) in network and wanted not in used:
                return str(wanted)
            if requested:
                why = "in use" if wanted in used else f"not in {topo.VIP_CIDR}"
                self._event(svc, "Warning", "LoadBalancerIPUnavailable", f"loadBalancerIP {wanted} is {why}")
                return None
        # Round-robin from the last address given, as cloud address pools do: an address a deleted
        # Service just gave up is not handed to the next Service while clients may still hold
        # flows to it.
        held = set(topo.request_range())
        hosts = [str(h) for h in network.hosts() if str(h) not in held]
        for step in range(len(hosts)):
            host = hosts[(self.next_vip + step) % len(hosts)]
            if host not in used:
                self.next_vip = (self.next_vip + step + 1) % len(hosts)
                return host
        self._event(svc, "Warning", "NoVIPLeft", f"no free address in {topo.VIP_CIDR}")
        return None

    def _serial_turn(self, run: str | None) -> bool:
        """Whether the serial-provisioning defect lets a new Service of ``run`` be provisioned now
        (one per ``SERIAL_PROVISIONING_SECONDS``); the others wait for a later pass."""
        now = time.monotonic()
        if now - self.serial_last.get(run, 0.0) < SERIAL_PROVISIONING_SECONDS:
            return False
        self.serial_last[run] = now
        return True

    def _ensure(self, svc: Json, slices: list[Json], nodes: list[plan.NodeInfo]) -> plan.ServicePlan | None:
        key = Informer.key(svc)
        st = self.services.get(key)
        if st is None or st.uid != svc["metadata"]["uid"]:
            if st is not None:
                self._forget(key)
            if "no-reprovision" in self.defects_for(svc) and svc["metadata"]["uid"] in self.released:
                return None
            if "serial-provisioning" in self.defects_for(svc) and not self._serial_turn(run_of(svc)):
                return None
            if not self._add_finalizer(svc, self.defects_for(svc)):
                return None
            vip = self._allocate_vip(svc)
            if vip is None:
                return None
            index = 1 + max((s.index for s in (*self.services.values(), *self.ghosts.values())), default=0)
            st = ServiceState(key, svc["metadata"]["uid"], vip, index,
                              first_ports=list(svc["spec"].get("ports") or []), run=run_of(svc),
                              spec=svc["spec"])
            self.services[key] = st
            self._event(svc, "Normal", "EnsuringLoadBalancer", f"assigned VIP {vip}")
        st.defects = self.defects_for(svc)
        if svc["spec"] != st.spec:
            st.spec = svc["spec"]
            if "move-ip-on-update" in st.defects:
                self._move_vip(svc, st)
        if "ignore-updates" in st.defects:
            svc = {**svc, "spec": {**svc["spec"], "ports": st.first_ports}}
        params = parse(svc["metadata"].get("annotations"), self.default_mode)
        if params != st.params:
            for err in params.errors:
                self._event(svc, "Warning", "InvalidAnnotation", f"{err}; using the default")
            if params.hc_interval != st.params.hc_interval or params.hc_protocol != st.params.hc_protocol:
                self._stop_checkers(st)
            st.params = params
        without_node_ports = svc["spec"].get("allocateLoadBalancerNodePorts") is False
        if without_node_ports and "require-node-ports" in st.defects:
            desired: dict[str, plan.Backend] = {}
        elif params.mode == "nodeport" and without_node_ports:
            if st.pool or st.counters["reconciles"] == 0:
                self._event(svc, "Warning", "UnsupportedConfiguration",
                            "nodeport mode needs node ports, and allocateLoadBalancerNodePorts is false: "
                            "use mode node or pod")
            desired = {}
        else:
            desired = plan.pool(svc, slices, plan.eligible(nodes, st.defects), params, st.defects)
        for k, b in desired.items():
            st.first_health.setdefault(k, b.health)
        if "stale-health-check" in st.defects:
            desired = {k: dataclasses.replace(b, health=st.first_health[k]) for k, b in desired.items()}
        st.counters["reconciles"] += 1
        self._set_status(svc, st)
        self._update_pool(st, desired)
        self._sync_checkers(st)
        if "rehash-on-restart" in st.defects and self.warm.get(st.key, ("", set()))[0] == st.uid:
            self._forget_flows(st, None)  # the process before this one pinned them
        healthy = self._healthy(st)
        self._apply_health_change(st, healthy)
        backends = [st.pool[k] for k in healthy]
        st.last_plan = plan.plan(svc, st.index, st.vip, params, backends, st.defects, st.last_plan,
                                 salt=self.salt)
        self._close_removed_listeners(st, st.last_plan)
        return st.last_plan

    def _close_removed_listeners(self, st: ServiceState, p: plan.ServicePlan) -> None:
        """Forget the flows of ports the Service no longer has: a UDP flow's every datagram would
        otherwise keep its conntrack entry, and so its way to a backend, alive."""
        listeners = frozenset((r.protocol, r.port) for r in p.rules)
        for protocol, port in sorted(st.listeners - listeners):
            self._forget_flows(st, None, protocol=protocol.lower(), port=port)
        st.listeners = listeners

    def _move_vip(self, svc: Json, st: ServiceState) -> None:
        """The move-ip-on-update defect: a new address, the old one's flows forgotten."""
        vip = self._allocate_vip(svc, fresh=True)
        if vip is None:
            return
        self._forget_flows(st, None)
        st.vip = vip
        self._event(svc, "Normal", "EnsuringLoadBalancer", f"assigned VIP {vip}")

    def _ghost_plans(self) -> list[plan.ServicePlan]:
        """The rules of deleted Services the keep-deleted-vip defect keeps, while their run (or
        the lab) has it; a ghost whose defect was switched off is forgotten."""
        plans = []
        for key, st in list(self.ghosts.items()):
            if "keep-deleted-vip" in self.defects_of_run(st.run) and st.last_plan is not None:
                plans.append(st.last_plan)
            else:
                del self.ghosts[key]
                self._forget_flows(st, None)
        return plans

    def _update_pool(self, st: ServiceState, desired: dict[str, plan.Backend]) -> None:
        if "stale-pool" in st.defects and st.params.mode == "pod":
            desired = {**st.ever_seen, **desired}
        st.ever_seen.update(desired)
        if desired == st.pool:
            st.pending_pool = None
            return
        delay = st.params.pool_update_delay if st.params.mode == "pod" else 0.0
        now = time.monotonic()
        if delay > 0:
            if st.pending_pool is None:
                st.pending_since = now
            st.pending_pool = desired
            if now - st.pending_since < delay:
                return  # a later pass applies it; passes run at least every MAX_PASS_SECONDS
        if st.pool or st.counters["poolChanges"]:
            st.joined.update((k, now) for k in desired if k not in st.pool)
        st.pool = desired
        st.pending_pool = None
        st.counters["poolChanges"] += 1

    def _sync_checkers(self, st: ServiceState) -> None:
        for k in list(st.checkers):
            b = st.pool.get(k)
            if b is None or b.health != st.checkers[k].target:
                st.checkers.pop(k).stop()
        for k, b in st.pool.items():
            if b.health is not None and k not in st.checkers:
                uid, warm = self.warm.get(st.key, ("", set()))
                healthy = uid == st.uid and k in warm and "cold-restart" not in st.defects
                c = Checker(f"{st.key}/{k}", b.health, st.params, self.dirty.set, healthy=healthy)
                st.checkers[k] = c
                c.start()

    def _healthy(self, st: ServiceState) -> list[str]:
        ignore = "ignore-health" in st.defects
        now = time.time()
        out = []
        for k, b in sorted(st.pool.items(), key=lambda kv: (kv[1].mark, kv[0])):
            h = st.health(k)
            passing = b.health is None or ignore or (h is not None and h.healthy)
            if "never-healthy-again" in st.defects and h is not None and h.found_unhealthy:
                passing = False
            if ("slow-registration" in st.defects and k in st.joined
                    and time.monotonic() - st.joined[k] < SLOW_REGISTRATION_SECONDS):
                passing = False
            # slow-unhealthy: a backend that was healthy stays so for a minute after it failed
            lingering = ("slow-unhealthy" in st.defects and h is not None and h.transitions > 0
                         and k in st.healthy and now - h.since < SLOW_UNHEALTHY_SECONDS)
            if passing or lingering:
                out.append(k)
        return out

    def _apply_health_change(self, st: ServiceState, healthy: list[str]) -> None:
        if healthy == st.healthy:
            return
        removed = [k for k in st.healthy if k not in healthy]
        now = time.time()
        for k in set(healthy) ^ set(st.healthy):
            st.health_changed[k] = now
        st.counters["healthySetChanges"] += 1
        previous = st.healthy
        st.healthy = healthy
        if not previous:
            return
        if "no-pinning" in st.defects or "reset-on-change" in st.defects:
            self._forget_flows(st, None)
            return
        if st.params.backend_removal == "reset" or "no-drain" in st.defects:
            for k in removed:
                self._forget_flows(st, st.pool.get(k) or st.ever_seen.get(k))
        elif st.params.mode == "pod" and "udp-stale" not in st.defects:
            # UDP has no connection to drain: a flow pinned to a pod that left would go on being
            # sent to it (every datagram refreshes the entry), as kube-proxy clears its own.
            for k in removed:
                self._forget_flows(st, st.pool.get(k) or st.ever_seen.get(k), protocol="udp")

    def _forget_flows(self, st: ServiceState, backend: plan.Backend | None, protocol: str = "",
                      port: int = 0) -> None:
        """Delete conntrack entries of the Service (or of one backend, of one protocol, to one
        port): their next packet is hashed again. Deleted once the pass's ruleset is in
        (``_run_forgets``), as kube-proxy orders it: deleted before, a packet arriving in between
        would make its entry again through the old rules, to the backend that left, and a UDP
        flow's every datagram would keep it there (seen as a UDP flow that never reached its
        new server, with many Services per pass)."""
        argv = ["conntrack", "-D", "--orig-dst", st.vip, *(["-p", protocol] if protocol else []),
                *(["--orig-port-dst", str(port)] if port else [])]
        if backend is not None:
            argv += ["--mark", str(backend.mark)] if st.params.mode == "node" else ["--reply-src", backend.ip]
        self.forgets.append((st, argv, f" of {backend.key}" if backend else ""))

    def _run_forgets(self) -> None:
        forgets, self.forgets = self.forgets, []
        for st, argv, which in forgets:
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
            count = sum(1 for line in out.stdout.splitlines() if line.strip())
            st.counters["flowsForgotten"] += count
            log.info("%s: forgot %d flows%s", st.key, count, which)

    # --- release ------------------------------------------------------------------------
    def _stop_checkers(self, st: ServiceState) -> None:
        for c in st.checkers.values():
            c.stop()
        st.checkers.clear()

    def _forget(self, key: str) -> None:
        st = self.services.pop(key, None)
        if st is not None:
            self._stop_checkers(st)
            if "keep-deleted-vip" in self.defects_of_run(st.run):
                self.ghosts[f"{key}/{st.uid}"] = st
            else:
                self._forget_flows(st, None)

    def _release(self, svc: Json) -> None:
        key = Informer.key(svc)
        retyped = not svc["metadata"].get("deletionTimestamp") and svc["spec"].get("type") != "LoadBalancer"
        if key in self.services and self.services[key].uid == svc["metadata"]["uid"]:
            self._forget(key)
            self._event(svc, "Normal", "DeletedLoadBalancer", "load balancer removed")
            if retyped:
                self.released.add(svc["metadata"]["uid"])
        if retyped and "keep-finalizer-on-type-change" in self.defects_for(svc):
            return  # the defect: the finalizer stays until the Service is deleted
        if retyped and svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
            self._patch_status(svc, None)
        if CLEANUP_FINALIZER in (svc["metadata"].get("finalizers") or []):
            self._set_finalizers(svc, [f for f in svc["metadata"]["finalizers"] if f != CLEANUP_FINALIZER])

    # --- API writes ----------------------------------------------------------------------
    def _svc_path(self, svc: Json) -> str:
        return f"/api/v1/namespaces/{svc['metadata']['namespace']}/services/{svc['metadata']['name']}"

    def _add_finalizer(self, svc: Json, defects: frozenset[str]) -> bool:
        finalizers = list(svc["metadata"].get("finalizers") or [])
        if CLEANUP_FINALIZER in finalizers or "drop-finalizer" in defects:
            return True
        return self._set_finalizers(svc, [*finalizers, CLEANUP_FINALIZER])

    def _set_finalizers(self, svc: Json, finalizers: list[str]) -> bool:
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": svc["metadata"]["resourceVersion"]}}
        try:
            self.api.patch(self._svc_path(svc), body, MERGE)
            return True
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("finalizer update of %s failed: %s", Informer.key(svc), exc)
            self.dirty.set()
            return False

    def _set_status(self, svc: Json, st: ServiceState) -> None:
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        want = [{"ip": st.vip, "ipMode": self._ip_mode(st)}]
        if ingress == want:
            return
        self._patch_status(svc, want)

    @staticmethod
    def _ip_mode(st: ServiceState) -> str:
        published = ip_mode(st.params.mode)
        if "wrong-ip-mode" in st.defects and st.params.mode != "node":
            return "VIP" if published == "Proxy" else "Proxy"
        return published

    def _patch_status(self, svc: Json, ingress: list[Json] | None) -> None:
        lb: dict[str, Any] = {"ingress": ingress}
        try:
            self.api.patch(self._svc_path(svc) + "/status", {"status": {"loadBalancer": lb}}, MERGE)
        except ApiError as exc:
            log.warning("status update of %s failed: %s", Informer.key(svc), exc)
            self.dirty.set()

    def _event(self, svc: Json, kind: str, reason: str, message: str) -> None:
        meta = svc["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            self.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"kind": "Service", "namespace": meta["namespace"], "name": meta["name"],
                                   "uid": meta["uid"], "apiVersion": "v1"},
                "reason": reason, "message": message, "type": kind,
                "source": {"component": "lbconform-lab-lb"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            })
        except ApiError as exc:
            log.debug("event %s not recorded: %s", reason, exc)

    # --- state for the API ---------------------------------------------------------------
    def describe(self, st: ServiceState) -> Json:
        backends = []
        for k, b in sorted(st.pool.items()):
            h = st.health(k)
            backends.append({
                "name": k, "address": b.ip, "ports": [{"protocol": p[0][0], "port": p[0][1], "target": p[1]}
                                                      for p in b.ports],
                "healthy": k in st.healthy,
                "lastChange": st.health_changed.get(k),
                "healthCheck": None if b.health is None else {
                    "target": f"{b.health.protocol}://{b.health.ip}:{b.health.port}{b.health.path}",
                    "passing": h.healthy if h else None, "lastResult": h.last_result if h else None,
                    "checks": h.checks if h else 0},
            })
        return {"service": st.key, "uid": st.uid, "vip": st.vip, "mode": st.params.mode,
                "parameters": st.params.as_dict(), "pool": backends, "healthy": st.healthy,
                "counters": dict(st.counters), "defects": sorted(st.defects)}

    def state(self) -> Json:
        with self.lock:
            return {"defects": sorted(self.defects),
                    "runDefects": {run: sorted(d) for run, d in sorted(self.run_defects.items())},
                    "services": {k: self.describe(s) for k, s in sorted(self.services.items())},
                    "deletedButKept": {k: s.vip for k, s in sorted(self.ghosts.items())}}
