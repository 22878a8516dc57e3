"""The provider of the lab's reference load balancer (pools from its state API), and the lab's power
over its nodes (``LabNodes``), which the providers of the other implementations the lab runs
(MetalLB, kube-vip) reach through ``lbconform.localcluster``."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Final

from lbconform.config import Timeouts
from lbconform.errors import LabError, UsageError
from lbconform.features import Feature
from lbconform.kube.rawapi import RawApi
from lbconform.providers.base import (
    NODE_POOL,
    POD_POOL,
    Declared,
    NotSupported,
    PoolMember,
    Provider,
    ServiceRef,
)
from lbconform.wait import poll_until
from lbconform_lab import topology as topo
from lbconform_lab.lb.client import LabLB
from lbconform_lab.lb.params import LB_CLASS, MODES, PREFIX, Params, ip_mode

#: kube-proxy's node agent restarts it a second after it exits and it syncs its rules in a
#: few more; this bounds a restart that never comes back.
KUBE_PROXY_RESTART_SECONDS: Final = 30.0
KUBE_PROXY_HEALTHZ_PORT: Final = 10256
#: The idle timeout the idle suites' Services ask the reference LB for: a minute, so that CI checks
#: the bracket (57 s and 63 s) that clouds' minutes-long timeouts get.
LAB_IDLE_SECONDS: Final = 60


def kube_proxy_pid(pid_file: Path, node: str) -> int | None:
    """The pid the node agent recorded for ``node``'s kube-proxy, if that process is still it.

    The agent records a bare pid, so the process's command line is checked against reuse.
    """
    try:
        pid = int(pid_file.read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if not argv or not argv[0].endswith(b"kube-proxy") or f"--hostname-override={node}".encode() not in argv:
        return None
    return pid


def on_lab(api: RawApi | None) -> bool:
    """Whether ``api`` is the running lab's apiserver (through its loopback forward)."""
    from lbconform_lab.state import LabDir

    labdir = LabDir()
    if api is None or not labdir.exists():
        return False
    try:
        port = labdir.read().api_port
    except LabError:
        return False
    host = str(api.api.configuration.host).rstrip("/")
    return host in (f"https://127.0.0.1:{port}", f"https://localhost:{port}")


class LabNodes:
    """What the lab does to its nodes for the chaos experiments, whichever LB it runs: a node
    dies as a VM does and comes back, a node's kube-proxy restarts."""

    def kill_node(self, name: str) -> None:
        from lbconform_lab.cluster import Lab

        Lab().kill_node(name)

    def start_node(self, name: str) -> None:
        """Start the node unless it runs (its agent, or a real node's kubelet)."""
        from lbconform_lab import procs
        from lbconform_lab import topology as topo
        from lbconform_lab.cluster import Lab, agent_key

        lab = Lab()
        state = lab.dir.read()
        node = topo.node_by_name(name, state.nodes)
        running = state.processes.get(agent_key(node)) or state.processes.get(f"kubelet-{node.name}")
        if running is not None and procs.alive(running):
            return
        lab.start_node(name)

    def restart_kube_proxy(self, node: str) -> None:
        """SIGTERM the node's kube-proxy and wait for a new one to answer: its node agent starts it
        again, as a DaemonSet would, or on a real node the lab does."""
        from lbconform_lab import procs
        from lbconform_lab import topology as topo
        from lbconform_lab.cluster import CONTAINERD, Lab
        from lbconform_lab.probe import http_status
        from lbconform_lab.state import LabDir

        labdir = LabDir()
        state = labdir.read()
        lab_node = topo.node_by_name(node, state.nodes)

        def answers() -> bool:
            status, _ = http_status(lab_node.netns, lab_node.ip, KUBE_PROXY_HEALTHZ_PORT, "/healthz")
            return status == 200

        if state.node_runtime == CONTAINERD:
            Lab().restart_kube_proxy(node)
            new = labdir.read().processes[f"kube-proxy-{lab_node.name}"]

            def restarted() -> bool:
                return procs.alive(new) and answers()
        else:
            pid_file = labdir.node_dir(lab_node.name) / "kube-proxy.pid"
            old = kube_proxy_pid(pid_file, lab_node.name)
            if old is None:
                raise LabError(f"kube-proxy of {node} is not running (no live pid in {pid_file})")
            os.kill(old, signal.SIGTERM)

            def restarted() -> bool:
                return kube_proxy_pid(pid_file, lab_node.name) not in (None, old) and answers()

        poll_until(restarted, timeout=KUBE_PROXY_RESTART_SECONDS, interval=0.2, retry_on=(OSError,),
                   description=f"a new kube-proxy on {node} to answer /healthz")


class LabProvider(LabNodes, Provider):
    """``--mode`` picks the reference LB's backend mode for every test Service (by annotation);
    without it the lab's default mode (``lab up --lb-mode``) applies and is what gets reported."""

    name = "lab"
    modes = MODES
    options_help: ClassVar[Mapping[str, str]] = {
        "idleTimeout": f"whole seconds the idle suites' Services ask for (default {LAB_IDLE_SECONDS})",
    }

    def __init__(self, client: LabLB | None = None) -> None:
        self.client = client or LabLB()
        self.mode = ""

    def check_target(self, kubeconfig_given: bool) -> None:
        if kubeconfig_given:
            raise UsageError("the lab provider reads the lab's own load balancer: with --kubeconfig, "
                             "name the cluster's provider with --provider (kind, metallb, generic, ...)")

    def configure(self, api: RawApi | None, options: Mapping[str, str]) -> None:
        super().configure(api, options)
        self.idle_timeout_to_ask()

    def service_annotations(self) -> dict[str, str]:
        return {f"{PREFIX}mode": self.mode} if self.mode else {}

    def idle_timeout_to_ask(self) -> int:
        """60 s unless the ``idleTimeout`` option says otherwise: a minute, so that a run checks the
        bracket clouds' timeouts get (the reference LB's default is Azure's 240 s)."""
        text = self.option("idleTimeout", default=str(LAB_IDLE_SECONDS))
        if not text.isdigit() or int(text) < 1:
            raise UsageError(f"--provider-option idleTimeout={text}: give whole seconds, at least 1")
        return int(text)

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        return {f"{PREFIX}idle-timeout-seconds": str(seconds)}

    def idle_reset_annotations(self, reset: bool) -> dict[str, str]:
        return {f"{PREFIX}tcp-reset": "true" if reset else "false"}

    def needs_node_ports(self) -> bool:
        return self.mode == "nodeport"

    def pod_pool_annotations(self) -> dict[str, str]:
        return {f"{PREFIX}mode": "pod"}

    def pool_kind(self, service: ServiceRef) -> str:
        return POD_POOL if self._mode_of(service) == "pod" else NODE_POOL

    def ip_mode(self, service: ServiceRef) -> str:
        """As the reference LB documents it: ``ipMode: Proxy`` in nodeport mode, where it rewrites
        the destination, VIP in the others (``params.ip_mode``)."""
        return ip_mode(self._mode_of(service))

    def _mode_of(self, service: ServiceRef) -> str:
        """The backend mode the reference LB gives the Service (the run's, before it has one)."""
        state = self.client.service(service.namespace, service.name)
        return str(state["mode"]) if state else (self.mode or "node")

    def features(self) -> set[Feature]:
        return set(Feature)

    def requestable_addresses(self) -> list[str]:
        return topo.request_range()

    def declared(self) -> Declared:
        d = Params()
        return Declared(health_check_interval=d.hc_interval, healthy_threshold=d.hc_healthy,
                        unhealthy_threshold=d.hc_unhealthy, idle_timeout=float(d.idle_timeout),
                        notes={"source": "lab.lbconform.io annotation defaults"},
                        load_balancer_class=LB_CLASS)

    def timeouts(self) -> Timeouts:
        # The lab LB answers in seconds; these leave room on a loaded 2-core machine.
        return Timeouts(lb_create=10, lb_propagation=30, lb_delete=30, endpoint_lag=15,
                        health_transition=10, rollout=90, namespace_delete=120, request=3)

    def restart_load_balancer(self) -> None:
        """The reference LB's process replaced by a new one (``Lab.restart_lb``)."""
        from lbconform_lab.cluster import Lab

        Lab().restart_lb()

    def node_agents(self) -> str:
        raise NotSupported("the reference LB runs no per-node agents: one process on the client's router "
                           "does all its work (restart_load_balancer restarts it)")

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        state = self.client.service(service.namespace, service.name)
        if state is None:
            return []
        healthy = set(state["healthy"])
        return [PoolMember(address=b["address"], healthy=b["name"] in healthy, name=b["name"])
                for b in state["pool"]]
