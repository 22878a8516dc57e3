"""The reference LB's controller: Services in, VIPs, status and nftables rules out.

One reconcile pass looks at every Service of type LoadBalancer of its class, as the
cloud-provider service controller does: it assigns and keeps a VIP, keeps the cleanup
finalizer, writes ``status.loadBalancer``, computes the pool, runs the health checks,
and programs the data plane. Removing a backend drains its pinned flows or forgets them,
as the Service asks. Defects apply lab-wide, or only to the Services of one harness run (those
labelled ``lbconform.io/run`` with its id), so that runs proving different defects can share
one lab at the same time.

This module coordinates the pass; each job is a module of its own: ``watch`` (the informers),
``allocate`` (addresses), ``pools`` (each Service's pool), ``checkers`` (health checks and the
healthy set), ``plan`` and ``nft`` (the rules), ``routes`` (node mode's policy routing), ``flows``
(forgetting pinned flows), ``status`` (what it writes to the apiserver), ``published`` (each
Service's pool as a BackendPool object), ``saved`` (what a restarted process starts from), ``view``
(the Services as the last pass left them) and ``api`` (the state API, which reads the view);
``defects`` is the table of defects and the hook points where they act.

One thread runs the passes and alone touches their state. The state API's threads read only what
a pass publishes whole as it ends (the view: they wait a bounded time for the pass in progress) and
switch the defects, which a pass reads once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from lbconform.kube.informer import Informer
from lbconform.kube.rawapi import Json, RawApi
from lbconform_lab.lb import checkers, nft, plan, pools
from lbconform_lab.lb import view as views
from lbconform_lab.lb.allocate import Addresses, Refusal, next_index
from lbconform_lab.lb.defects import DEFECTS, At, Pace, apply
from lbconform_lab.lb.flows import Flows
from lbconform_lab.lb.health import Probes
from lbconform_lab.lb.params import parse
from lbconform_lab.lb.published import Published, Publisher
from lbconform_lab.lb.routes import NodeRoutes
from lbconform_lab.lb.saved import Saved, StateFile
from lbconform_lab.lb.service import ServiceState
from lbconform_lab.lb.status import Writes
from lbconform_lab.lb.watch import Watch, run_of, wants_lb

__all__ = ["MAX_PASS_SECONDS", "MIN_PASS_SECONDS", "SLOW_PASS_SECONDS", "Controller", "ServiceState",
           "run_of", "wants_lb"]

log = logging.getLogger(__name__)

#: A reconcile pass runs at most every MIN_PASS_SECONDS, and at least every MAX_PASS_SECONDS
#: without events: time-based decisions (pool batching, the slow-unhealthy and serial-provisioning
#: defects) are taken on those passes, so they are late by at most MAX_PASS_SECONDS.
MIN_PASS_SECONDS = 0.05
MAX_PASS_SECONDS = 0.5
#: A pass longer than this is logged: every Service waits for it.
SLOW_PASS_SECONDS = 1.0


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
        self.default_mode = default_mode
        #: The defects as last switched, lab-wide and per run (run id -> defects): each replaced
        #: whole when switched (``set_defects``, from the state API's threads), never changed in place.
        self.defects: frozenset[str] = frozenset(defects)
        self.run_defects: Mapping[str, frozenset[str]] = MappingProxyType({})
        self._switching = threading.Lock()
        #: The defects the pass in progress applies, read once as it starts.
        self._in_force: tuple[frozenset[str], Mapping[str, frozenset[str]]] = (self.defects, self.run_defects)
        #: The Services as the last pass left them: what the state API answers (``current_view``).
        self.view = views.View()
        self.passes = views.Passes()
        self.view_wait = views.VIEW_WAIT_SECONDS
        self.dirty = threading.Event()
        #: Set once the first reconcile pass has rendered the rules.
        self.ready = threading.Event()
        self.services: dict[str, ServiceState] = {}
        #: Deleted Services whose rules the keep-deleted-vip defect keeps, by key.
        self.ghosts: dict[str, ServiceState] = {}
        #: UIDs of Services released because their type changed (the no-reprovision defect
        #: never provisions them again).
        self.released: set[str] = set()
        self.timeouts: set[tuple[int, str]] = set()
        self.ruleset = ""
        self.addresses = Addresses()
        self.flows = Flows()
        #: The health checks' probes, shared by the Services that check a target alike.
        self.probes = Probes()
        self.routes = NodeRoutes()
        self.writes = Writes(api, self.dirty.set)
        self.published = Publisher(Published(api))
        #: The serial-provisioning defect's clock.
        self.pace = Pace()
        self.state_file = StateFile(state_file)
        #: The healthy backends the process before this one saved, by Service key: (uid, backend
        #: keys). Their first checkers start healthy; each entry is used by one pass and dropped.
        self.warm: dict[str, tuple[str, set[str]]] = {}
        #: The same, kept whole: saved again until the first pass has a view of its own.
        self.loaded_healthy: dict[str, tuple[str, set[str]]] = {}
        #: This process's own hash salt, used only under the rehash-on-restart defect.
        self.salt = int.from_bytes(os.urandom(4), "big")
        self._load()
        self.watch = Watch(api, self.dirty.set)

    @property
    def next_vip(self) -> int:
        """Where the next VIP search starts (an index into VIP_CIDR's hosts)."""
        return self.addresses.cursor

    @next_vip.setter
    def next_vip(self, cursor: int) -> None:
        self.addresses.cursor = cursor

    # --- runtime control -------------------------------------------------------------------
    def set_defects(self, defects: set[str], run: str | None = None) -> None:
        """Switch the lab-wide defects, or (with ``run``) those of one run's Services."""
        unknown = set(defects) - set(DEFECTS)
        if unknown:
            raise ValueError(f"unknown LB defect(s): {', '.join(sorted(unknown))}")
        with self._switching:
            if run is None:
                self.defects = frozenset(defects)
            else:
                per_run = {r: d for r, d in self.run_defects.items() if r != run}
                if defects:
                    per_run[run] = frozenset(defects)
                self.run_defects = MappingProxyType(per_run)
            self._save()
        self.dirty.set()

    def defects_for(self, svc: Json) -> frozenset[str]:
        return self.defects_of_run(run_of(svc))

    def defects_of_run(self, run: str) -> frozenset[str]:
        """The defects the pass in progress applies to the Services of ``run``."""
        lab_wide, per_run = self._in_force
        return lab_wide | per_run.get(run, frozenset())

    def run(self) -> None:
        self.watch.start()
        self.published.start()
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
    def current_view(self) -> views.View:
        """The view once the pass in progress has ended, or after ``view_wait`` the last one."""
        self.passes.wait_for_current(self.view_wait)
        return self.view

    def reconcile(self) -> None:
        self.passes.begin()
        try:
            self._pass()
        finally:
            self.passes.end()

    def _pass(self) -> None:
        services = self.watch.service_list()
        # The defects are read after the Services: a Service that a run made after switching its
        # defects is in this pass only if its defects are too.
        self._in_force = (self.defects, self.run_defects)
        nodes = self.watch.node_infos()
        self.routes.ensure(nodes)
        slices = self.watch.slices_by_service()
        plans = []
        seen = set()
        released: list[Json] = []
        for svc in services:
            key = Informer.key(svc)
            if svc["metadata"].get("deletionTimestamp") or not wants_lb(svc, self.defects_for(svc)):
                if (done := self._let_go(svc)) is not None:
                    released.append(done)
                continue
            seen.add(key)
            p = self._ensure(svc, slices.get(key, []), nodes)
            if p is not None:
                plans.append(p)
        for key in list(self.services):
            if key not in seen:
                self._forget(key)
        self.published.retry_removals(self.services)
        plans += self._ghost_plans()
        ruleset = nft.render(sorted(plans, key=lambda p: p.index), self.timeouts)
        if ruleset != self.ruleset:
            nft.apply(ruleset)
            self.ruleset = ruleset
        self.flows.run()
        self.published.commit()
        self.warm.clear()
        self._publish()
        # As a cloud provider removes the finalizer once the load balancer is deleted: a reader
        # who sees the Service gone finds neither its rules nor its state.
        for svc in released:
            self.writes.remove_finalizer(svc)

    def _publish(self) -> None:
        """The pass's end: its view replaces the last one, the LB is ready, and what a restart
        needs is saved."""
        self.view = views.build(self.services.values(), self.ghosts)
        self.ready.set()
        self._save()

    def _ensure(self, svc: Json, slices: list[Json], nodes: list[plan.NodeInfo]) -> plan.ServicePlan | None:
        """The Service provisioned, its status, pool and health checks up to date: its rules."""
        key = Informer.key(svc)
        st = self.services.get(key)
        if st is None or st.uid != svc["metadata"]["uid"]:
            if st is not None:
                self._forget(key)
            st = self._provision(svc)
            if st is None:
                return None
        st.defects = self.defects_for(svc)
        if svc["spec"] != st.spec:
            st.spec = svc["spec"]
            if not apply(At.KEEP_ADDRESS, True, st.defects):
                self._move_vip(svc, st)
        svc = apply(At.SPEC, svc, st.defects, st.first_ports)
        params = parse(svc["metadata"].get("annotations"), self.default_mode)
        if params != st.params:
            for err in params.errors:
                self.writes.event(svc, "Warning", "InvalidAnnotation", f"{err}; using the default")
            if params.hc_interval != st.params.hc_interval or params.hc_protocol != st.params.hc_protocol:
                checkers.stop(st, self.probes)
            st.params = params
        wanted = pools.desired(svc, st, slices, nodes,
                               lambda reason, message: self.writes.event(svc, "Warning", reason, message))
        st.counters["reconciles"] += 1
        self.writes.publish(svc, st)
        pools.update(st, wanted)
        warm_uid, warm = self.warm.get(st.key, ("", set()))
        checkers.sync(st, self.probes, warm if warm_uid == st.uid else set(), self.dirty.set)
        if warm_uid == st.uid and not apply(At.KEEP_FLOWS, True, st.defects):
            self.flows.forget(st, None)  # the process before this one pinned them
        previous = checkers.record(st, checkers.healthy_set(st))
        if previous:
            self.flows.healthy_set_changed(st, previous)
        self.published.sync(st)
        backends = [st.pool[k] for k in st.healthy]
        st.last_plan = plan.plan(svc, st.index, st.vip, params, backends, st.defects, st.last_plan,
                                 salt=self.salt)
        self.flows.close_removed_listeners(st, st.last_plan)
        return st.last_plan

    def _provision(self, svc: Json) -> ServiceState | None:
        """A new Service: its finalizer, its address and its state; None if not in this pass."""
        defects = self.defects_for(svc)
        if svc["metadata"]["uid"] in self.released and not apply(At.REPROVISION, True, defects):
            return None
        if not apply(At.PACE, True, defects, lambda: self.pace.turn(run_of(svc))):
            return None
        if not self.writes.add_finalizer(svc, defects):
            return None
        vip = self._allocate(svc, defects)
        if vip is None:
            return None
        index = next_index((*self.services.values(), *self.ghosts.values()))
        st = ServiceState(Informer.key(svc), svc["metadata"]["uid"], vip, index,
                          first_ports=list(svc["spec"].get("ports") or []), run=run_of(svc), spec=svc["spec"])
        self.services[st.key] = st
        self.writes.event(svc, "Normal", "EnsuringLoadBalancer", f"assigned VIP {vip}")
        return st

    def _allocate(self, svc: Json, defects: frozenset[str], fresh: bool = False) -> str | None:
        """An address for the Service (``Addresses.allocate``), or None and a Warning event."""
        used = {s.vip for s in (*self.services.values(), *self.ghosts.values())}
        vip = self.addresses.allocate(svc, used, defects, fresh)
        if isinstance(vip, Refusal):
            self.writes.event(svc, "Warning", vip.reason, vip.message)
            return None
        return vip

    def _move_vip(self, svc: Json, st: ServiceState) -> None:
        """The move-ip-on-update defect: a new address, the old one's flows forgotten."""
        vip = self._allocate(svc, self.defects_for(svc), fresh=True)
        if vip is None:
            return
        self.flows.forget(st, None)
        st.vip = vip
        self.writes.event(svc, "Normal", "EnsuringLoadBalancer", f"assigned VIP {vip}")

    def _ghost_plans(self) -> list[plan.ServicePlan]:
        """The rules of deleted Services the keep-deleted-vip defect keeps, while their run (or
        the lab) has it; a ghost whose defect was switched off is forgotten."""
        plans = []
        for key, st in list(self.ghosts.items()):
            if apply(At.KEEP_DELETED, False, self.defects_of_run(st.run)) and st.last_plan is not None:
                plans.append(st.last_plan)
            else:
                del self.ghosts[key]
                self.flows.forget(st, None)
        return plans

    # --- release ------------------------------------------------------------------------
    def _forget(self, key: str) -> None:
        """Let the Service's state go: its checkers stop, its flows are forgotten, its BackendPool
        is deleted."""
        st = self.services.pop(key, None)
        if st is not None:
            checkers.stop(st, self.probes)
            self.published.remove(key)
            if apply(At.KEEP_DELETED, False, self.defects_of_run(st.run)):
                self.ghosts[f"{key}/{st.uid}"] = st
            else:
                self.flows.forget(st, None)

    def _let_go(self, svc: Json) -> Json | None:
        """A Service the LB does not serve (deleted, of another type or class): its state let go,
        its address out of its status if its type changed. The Service whose finalizer is left to
        remove once the pass's rules and view no longer hold it; None if nothing is."""
        key = Informer.key(svc)
        retyped = not svc["metadata"].get("deletionTimestamp") and svc["spec"].get("type") != "LoadBalancer"
        if key in self.services and self.services[key].uid == svc["metadata"]["uid"]:
            self._forget(key)
            self.writes.event(svc, "Normal", "DeletedLoadBalancer", "load balancer removed")
            if retyped:
                self.released.add(svc["metadata"]["uid"])
        if retyped and not apply(At.TYPE_CHANGE, True, self.defects_for(svc)):
            return None
        if retyped and svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
            self.writes.clear(svc)
        return svc

    # --- across restarts -------------------------------------------------------------------
    def _save(self) -> None:
        """Save the defects as last switched and the healthy backends of the last pass's view (the
        pass and ``set_defects`` both save; ``StateFile`` writes one at a time)."""
        healthy = self.view.healthy() if self.ready.is_set() else self.loaded_healthy
        self.state_file.save(Saved(self.defects, self.run_defects, self.addresses.cursor, healthy))

    def _load(self) -> None:
        """Start from the state the process before this one saved, if any: its defects replace
        those of the command line, which were the lab's at boot."""
        saved = self.state_file.load()
        if saved is None:
            return
        self.defects = saved.defects
        self.run_defects = MappingProxyType(dict(saved.run_defects))
        self.addresses.cursor = saved.next_vip
        self.warm = dict(saved.healthy)
        self.loaded_healthy = dict(saved.healthy)
