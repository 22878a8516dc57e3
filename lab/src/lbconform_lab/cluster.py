"""Bringing a lab up, down and back, and telling what runs: the lab's lifecycle.

``up`` checks everything it can before it makes anything (root, tools, a running lab,
namespaces and the port already taken), then records each namespace and process in the
lab directory as it makes it. If any step fails, it tears down what it made and says which
component failed, with the tail of its log. ``down`` removes exactly what the record says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from lbconform.cache import cache_root
from lbconform.errors import LabError, UsageError
from lbconform.kube.rawapi import Json, RawApi, api_client
from lbconform.logs import log_tail
from lbconform.signals import held
from lbconform.wait import poll_until
from lbconform_lab import (
    build,
    controlplane,
    images,
    kubevip,
    machine,
    metallb,
    network,
    nodeconfig,
    procs,
    realnode,
)
from lbconform_lab import netns as ns
from lbconform_lab import topology as topo
from lbconform_lab.lb import published
from lbconform_lab.lb.api import PORT as LB_API_PORT
from lbconform_lab.lb.params import DEFECTS, MODES
from lbconform_lab.pki import Identity, Pki
from lbconform_lab.probe import client_tls, http_status
from lbconform_lab.state import LabDir, LabState, Process

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

DEFAULT_API_PORT: Final = topo.DEFAULT_API_PORT
#: Time allowed for each boot phase; a healthy lab needs a fraction of these.
ETCD_READY_SECONDS: Final = 30.0
APISERVER_READY_SECONDS: Final = 60.0
NODES_READY_SECONDS: Final = 60.0
#: How long ``lab node start`` waits for the node to be Ready again.
NODE_RESTART_READY_SECONDS: Final = 60.0
LB_READY_SECONDS: Final = 30.0
#: A real node's kube-proxy is SIGKILLed if it has not ended this long after SIGTERM (a pod's
#: default grace period).
KUBE_PROXY_STOP_SECONDS: Final = 30.0
#: What the reference LB saves for the process that replaces it, in the lab's directory.
LB_STATE_FILE: Final = "lb-state.json"
#: The reference LB's identity; RBAC grants it what a cloud service controller has.
LB_USER: Final = "lbconform:lab-lb"

REQUIRED_TOOLS: Final = {"ip": "iproute2", "nft": "nftables", "conntrack": "conntrack"}

#: The lab's load balancers (``lab up --lb``): this project's reference LB, or MetalLB or kube-vip
#: as upstream ships them (built with ``lab build --with metallb`` or ``--with kube-vip``).
REFERENCE_LB, METALLB, KUBE_VIP = "reference", "metallb", "kube-vip"
LBS: Final = (REFERENCE_LB, METALLB, KUBE_VIP)
#: The third-party load balancers' names as people write them, for messages.
LB_NAMES: Final = {METALLB: "MetalLB", KUBE_VIP: "kube-vip"}

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

#: What runs a lab node's pods (``lab up --node-runtime``): the node agent, or the real kubelet
#: with containerd, runc and the CNI plugins (built with ``lab build --with nodes``; not yet the
#: default while every suite and lab test moves to it).
AGENT, CONTAINERD = "agent", "containerd"
NODE_RUNTIMES: Final = (AGENT, CONTAINERD)


def kubelet_api_rbac() -> Json:
    """The apiserver's kubelet client may use every kubelet's API (logs, exec, port-forward), as
    kubeadm binds it: a real kubelet asks the apiserver to authorize each caller."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "lbconform:kubelet-api-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                          "name": controlplane.KUBELET_CLIENT_USER}]}


def lb_rbac() -> list[Json]:
    """ClusterRole and binding of the reference LB: what cloud-controller-manager's service controller
    has, and its own BackendPools (``lb.published``)."""
    rules = [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [""], "resources": ["services/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": [published.GROUP], "resources": [published.PLURAL],
         "verbs": ["get", "create", "patch", "update", "delete"]},
    ]
    base = "/apis/rbac.authorization.k8s.io/v1"
    name = "lbconform:lab-lb"
    return [
        {"_collection": f"{base}/clusterroles", "apiVersion": "rbac.authorization.k8s.io/v1",
         "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules},
        {"_collection": f"{base}/clusterrolebindings", "apiVersion": "rbac.authorization.k8s.io/v1",
         "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": LB_USER}]},
    ]


def kubelet_api_certs(pki: Pki, lab: LabDir, nodes: list[topo.Node]) -> tuple[Path, Path]:
    """Each node's kubelet API serving certificate (its IP and name), and the apiserver's client
    certificate towards them; returns the latter. Files are where ``LabDir`` says they are."""
    for node in nodes:
        # Pki names its files after the stem, in the lab's pki directory, as LabDir does.
        pki.serving(lab.kubelet_serving(node.name)[0].stem, [node.name], [node.ip])
    return pki.client(Identity(lab.kubelet_client()[0].stem, controlplane.KUBELET_CLIENT_USER))


def agent_key(node: topo.Node) -> str:
    return f"agent-{node.name}"


def node_keys(node: topo.Node) -> tuple[str, ...]:
    """The recorded processes that are the node, whichever its runtime (the agent, or the real
    node's kubelet, containerd and kube-proxy)."""
    return (agent_key(node), f"kubelet-{node.name}", f"containerd-{node.name}", f"kube-proxy-{node.name}")


@dataclass
class BootReport:
    """Seconds spent in each phase of ``lab up``."""

    phases: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.phases.values())


@dataclass
class NodeStatus:
    name: str
    agent: bool
    ready: str
    pod_cidr: str


def check_node_runtime(node_runtime: str) -> None:
    """Refuse a node runtime the lab does not have, or cannot run for want of its build or of
    the machine's files its images take."""
    if node_runtime not in NODE_RUNTIMES:
        raise UsageError(f"--node-runtime must be one of {', '.join(NODE_RUNTIMES)}, "
                         f"not {node_runtime!r}")
    if node_runtime == CONTAINERD and not build.optional_built("nodes"):
        raise UsageError("--node-runtime containerd: the real nodes' components are not built; "
                         "run 'lbconform lab build --with nodes' first")
    if node_runtime == CONTAINERD and images.missing():
        raise UsageError(f"--node-runtime containerd: the nodes' images need "
                         f"{', '.join(images.missing())}: install the Debian packages "
                         f"{' '.join(images.DEBS)} (make setup does)")


@dataclass
class LabStatus:
    running: bool
    lab_dir: Path
    api_port: int = 0
    processes: dict[str, bool] = field(default_factory=dict)
    nodes: list[NodeStatus] = field(default_factory=list)
    api_error: str = ""


class Lab:
    """One lab, identified by its directory."""

    def __init__(self, labdir: LabDir | None = None, progress: Progress | None = None) -> None:
        topo.check_instance()
        self.dir = labdir or LabDir()
        self.progress = progress or (lambda msg: log.info("%s", msg))

    # --- checks before anything is made ---------------------------------------------------
    def preflight(self, nodes: list[topo.Node], api_port: int, lb: str = REFERENCE_LB) -> None:
        if os.geteuid() != 0:
            raise UsageError("the lab needs root (network namespaces, nftables): run it as root")
        for tool, package in REQUIRED_TOOLS.items():
            if shutil.which(tool) is None:
                raise UsageError(
                    f"'{tool}' is missing: install the Debian package {package} (or run 'make setup')")
        if self.leftover():
            raise LabError(
                f"a lab left by an earlier run is recorded in {self.dir.root}, but none of its processes "
                "runs (a crash or a restart): remove it with 'lbconform lab down', then retry"
            )
        if self.dir.exists():
            raise LabError(
                f"a lab is already running (state in {self.dir.root}): "
                "use it, or remove it with 'lbconform lab down'"
            )
        taken = sorted(set(network.plan(nodes)) & ns.list_netns())
        if taken:
            raise LabError(
                f"network namespace {taken[0]} already exists and no lab is recorded: "
                f"remove it with 'ip netns del {taken[0]}' if it is a leftover, then retry"
            )
        if not build.binaries_built():
            build.find_go()
        if lb != REFERENCE_LB and not build.optional_built(lb):
            raise UsageError(f"{LB_NAMES[lb]} is not built: run 'lbconform lab build --with {lb}', "
                             "then retry")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # The forward binds with SO_REUSEADDR too: a previous lab's TIME_WAIT is no conflict.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", api_port))
            except OSError:
                raise LabError(
                    f"port 127.0.0.1:{api_port} is taken: choose another with --api-port"
                ) from None

    # --- up ------------------------------------------------------------------------------
    def up(self, node_count: int = 3, api_port: int = DEFAULT_API_PORT,
           lb_defects: tuple[str, ...] = (), lb_mode: str | None = None,
           lb: str = REFERENCE_LB, node_runtime: str = AGENT) -> BootReport:
        """Boot a lab. ``lb_mode`` and ``lb_defects`` are the reference LB's; with ``lb`` metallb
        or kube-vip the lab runs that instead, which has neither."""
        nodes = topo.nodes(node_count)
        if not 1024 <= api_port <= 65535:
            raise UsageError(f"--api-port must be between 1024 and 65535, not {api_port}")
        if lb not in LBS:
            raise UsageError(f"--lb {lb!r}: the lab's load balancers are {', '.join(LBS)}")
        if lb != REFERENCE_LB and lb_defects:
            raise UsageError(f"--lb-defect: defects belong to the reference LB; the lab runs {lb} as "
                             "upstream ships it (drop --lb-defect, or use --lb reference)")
        if lb != REFERENCE_LB and lb_mode is not None:
            raise UsageError(f"--lb-mode: modes belong to the reference LB; {lb} has none here "
                             "(drop --lb-mode)")
        lb_mode = lb_mode or "node"
        if lb_mode not in MODES:
            raise UsageError(f"--lb-mode must be one of {', '.join(MODES)}, not {lb_mode!r}")
        unknown = sorted(set(lb_defects) - set(DEFECTS))
        if unknown:
            raise UsageError(f"unknown LB defect {unknown[0]!r}: the lab knows {', '.join(DEFECTS)}")
        check_node_runtime(node_runtime)
        self.preflight(nodes, api_port, lb)
        report = BootReport()
        if not build.binaries_built():
            with self._phase(report, "build"):
                build.Builder(progress=self.progress).build_all()
        state = LabState(nodes=node_count, api_port=api_port, lb=lb, lb_mode=lb_mode,
                         lb_defects=list(lb_defects), node_runtime=node_runtime)
        # A signal (``lbconform.signals.stoppable``) or a failure at any step tears down what the
        # steps before made; each step is recorded with what it makes (``held``).
        try:
            with held():
                self.dir.root.mkdir(parents=True, exist_ok=True)
                self.dir.write(state)
            self._boot(state, nodes, report)
        except BaseException as exc:
            # Saying so may fail too (a closed pipe): it must not keep the half-made lab.
            with contextlib.suppress(Exception):
                self.progress(f"lab up failed: {exc}; tearing down what was started")
            with contextlib.suppress(Exception):
                self.down()
            raise
        return report

    @contextlib.contextmanager
    def _phase(self, report: BootReport, name: str) -> Iterator[None]:
        self.progress(f"{name}...")
        started = time.monotonic()
        yield
        report.phases[name] = time.monotonic() - started

    def _spawn(self, state: LabState, key: str, argv: list[str], netns: str | None) -> Process:
        """Start a lab process and record it, never one without the other."""
        with held():
            proc = procs.spawn(key, argv, netns=netns, log_path=self.dir.logs / f"{key}.log",
                               env=_child_env())
            state.processes[key] = proc
            self.dir.write(state)
        return proc

    def _boot(self, state: LabState, nodes: list[topo.Node], report: BootReport) -> None:
        with self._phase(report, "pki"):
            certs = self._pki(nodes, state.api_port)
        with self._phase(report, "network"):
            def record(name: str) -> None:
                state.namespaces.append(name)
                self.dir.write(state)

            network.build(nodes, record, vips_on_link=state.lb != REFERENCE_LB)
        f = topo.FABRIC_NS
        with self._phase(report, "etcd"):
            etcd = self._spawn(state, "etcd", controlplane.etcd_args(build.binary("etcd"), self.dir), f)
            self._wait_http("etcd", [etcd], f, "127.0.0.1", 2379, "/health", ETCD_READY_SECONDS)
        with self._phase(report, "apiserver"):
            apiserver = self._spawn(state, "kube-apiserver", controlplane.apiserver_args(
                build.binary("kube-apiserver"), certs), f)
            forward = self._spawn(state, "api-forward", [
                sys.executable, "-m", "lbconform_lab.forward", str(state.api_port), f,
                f"{topo.APISERVER_IP}:{topo.APISERVER_PORT}"], None)
            tls = client_tls(self.dir.pki / "ca.crt", self.dir.pki / "admin.crt", self.dir.pki / "admin.key")
            self._wait_http("kube-apiserver", [apiserver, forward], None, "127.0.0.1",
                            state.api_port, "/readyz", APISERVER_READY_SECONDS, tls)
        with self._phase(report, "controllers"):
            kcfg = self.dir.pki
            self._spawn(state, "kube-controller-manager", controlplane.controller_manager_args(
                build.binary("kube-controller-manager"), kcfg / "kube-controller-manager.kubeconfig",
                certs), f)
            self._spawn(state, "kube-scheduler", controlplane.scheduler_args(
                build.binary("kube-scheduler"), kcfg / "kube-scheduler.kubeconfig"), f)
        if state.lb == REFERENCE_LB:
            with self._phase(report, "load balancer"):
                self._start_lb(state)
        with self._phase(report, "nodes"):
            if state.node_runtime == CONTAINERD:
                self.api().post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", kubelet_api_rbac())
                machine.hold(str(self.dir.root), nodeconfig.KUBELET_SYSCTLS, realnode.MACHINE_DIRS)
                self._start_real_nodes(state, nodes, images.ensure(lb=state.lb))
            else:
                for node in nodes:
                    self._start_agent(state, node)
            self._wait_nodes_ready(state, nodes, NODES_READY_SECONDS)
            if state.node_runtime == CONTAINERD:
                self._route_pod_cidrs(state, nodes)
        if state.lb == METALLB:
            with self._phase(report, "metallb"):
                metallb.install(self.api(), self.dir.kubeconfig, len(nodes), self.progress)
        if state.lb == KUBE_VIP:
            with self._phase(report, "kube-vip"):
                kubevip.install(self.api(), self.dir.kubeconfig, len(nodes), self.progress)
        state.ready = True
        self.dir.write(state)

    def _pki(self, nodes: list[topo.Node], api_port: int) -> controlplane.Certs:
        pki = Pki(self.dir.pki)
        crt, key = pki.serving(
            "kube-apiserver",
            ["kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local", "localhost"],
            [topo.APISERVER_IP, "127.0.0.1", topo.KUBERNETES_SERVICE_IP],
        )
        inside = f"https://{topo.APISERVER_IP}:{topo.APISERVER_PORT}"
        admin = Identity("admin", "lbconform-admin", ("system:masters",))
        pki.kubeconfig(self.dir.kubeconfig, admin, f"https://127.0.0.1:{api_port}")
        pki.kubeconfig(self.dir.lab_kubeconfig, admin, inside)
        pki.kubeconfig(self.dir.pki / "lb.kubeconfig", Identity("lb", LB_USER), inside)
        for component in ("kube-controller-manager", "kube-scheduler"):
            pki.kubeconfig(self.dir.pki / f"{component}.kubeconfig",
                           Identity(component, f"system:{component}"), inside)
        for node in nodes:
            nd = self.dir.node_dir(node.name)
            nd.mkdir(parents=True, exist_ok=True)
            pki.kubeconfig(nd / "kubeconfig",
                           Identity(f"node-{node.name}", f"system:node:{node.name}", ("system:nodes",)),
                           inside)
            pki.kubeconfig(nd / "kube-proxy.kubeconfig",
                           Identity(f"kube-proxy-{node.name}", "system:kube-proxy"), inside)
        client_crt, client_key = kubelet_api_certs(pki, self.dir, nodes)
        return controlplane.Certs(ca=pki.ca_file, apiserver_crt=crt, apiserver_key=key,
                                  sa_key=pki.sa_key_file, sa_pub=pki.sa_pub_file,
                                  kubelet_client_crt=client_crt, kubelet_client_key=client_key)

    def _start_lb(self, state: LabState) -> None:
        api = self.api()
        published.install(api)  # Established before the LB writes its first BackendPool
        for obj in lb_rbac():
            api.post(obj.pop("_collection"), obj)
        self._spawn_lb(state)

    def _spawn_lb(self, state: LabState) -> None:
        argv = [sys.executable, "-m", "lbconform_lab.lb", "--kubeconfig", str(self.dir.pki / "lb.kubeconfig"),
                "--mode", state.lb_mode, "--state-file", str(self.dir.root / LB_STATE_FILE)]
        for d in state.lb_defects:
            argv += ["--defect", d]
        lb = self._spawn(state, "lb", argv, topo.LB_NS)
        self._wait_http("the reference load balancer", [lb], topo.LB_NS, "127.0.0.1", LB_API_PORT,
                        "/healthz", LB_READY_SECONDS)

    def _start_agent(self, state: LabState, node: topo.Node) -> None:
        self._spawn(state, agent_key(node), [
            sys.executable, "-m", "lbconform_lab.agent", "--node", node.name,
            "--nodes", str(state.nodes), "--lab-dir", str(self.dir.root)], node.netns)

    def _node_paths(self, node: topo.Node) -> nodeconfig.NodePaths:
        return realnode.paths(node, self.dir.node_dir(node.name))

    def _start_real_nodes(self, state: LabState, nodes: Sequence[topo.Node], tars: list[Path]) -> None:
        """Each node's namespaces and files as a boot finds them, containerd with the lab's images
        (imported into the nodes side by side), the kubelet, and kube-proxy (a lab process in the
        node's network namespace)."""
        def spawn(key: str, argv: list[str]) -> Process:
            return self._spawn(state, key, argv, None)

        paths = [self._node_paths(node) for node in nodes]
        for p in paths:
            realnode.prepare(p, self.dir.pki / "ca.crt", self.dir.kubelet_serving(p.node.name))
            realnode.start_containerd(p, spawn)
        realnode.import_images(paths, tars)
        for p in paths:
            realnode.start_kubelet(p, spawn, self.dir.node_dir(p.node.name) / "kubeconfig")
            self._spawn_kube_proxy(state, p.node)

    def _spawn_kube_proxy(self, state: LabState, node: topo.Node) -> None:
        """A real node's kube-proxy: a lab process in the node's network namespace (the agent runs
        its node's own)."""
        kube_proxy = controlplane.kube_proxy_args(
            build.binary("kube-proxy"), self.dir.node_dir(node.name) / "kube-proxy.kubeconfig", node)
        self._spawn(state, f"kube-proxy-{node.name}", kube_proxy, node.netns)

    def restart_kube_proxy(self, name: str) -> None:
        """A real node's kube-proxy ended by SIGTERM and started again, as its DaemonSet's pod is
        restarted (its rules stay in place meanwhile)."""
        state = self.dir.read()
        node = topo.node_by_name(name, state.nodes)
        old = state.processes.get(f"kube-proxy-{node.name}")
        if state.node_runtime != CONTAINERD or old is None or not procs.alive(old):
            raise LabError(f"{name} has no kube-proxy of the lab's running (a node agent runs its own, or "
                           "the node is down)")
        procs.stop([old], grace=KUBE_PROXY_STOP_SECONDS)
        self._spawn_kube_proxy(state, node)

    def _route_pod_cidrs(self, state: LabState, nodes: list[topo.Node]) -> None:
        """Each node's podCIDR routed through its address in every other namespace on the fabric,
        as a cluster's network routes it (the agent did it for its own node)."""
        peers = [topo.FABRIC_NS, topo.LB_NS, *(n.netns for n in topo.nodes(state.nodes))]
        api = self.api()
        for node in nodes:
            cidr = api.get(f"/api/v1/nodes/{node.name}").get("spec", {}).get("podCIDR", "")
            for peer in peers:
                if peer != node.netns:
                    ns.route_replace(peer, cidr, "via", node.ip)

    def _stop_real_node(self, state: LabState, node: topo.Node) -> None:
        """The node's power cut: its kubelet, containerd and kube-proxy, then every process in its
        cgroup, SIGKILLed; its namespaces' mounts gone."""
        for key in node_keys(node):
            proc = state.processes.get(key)
            if proc is not None:
                procs.signal_process(proc, signal.SIGKILL)
        realnode.cut(self._node_paths(node))

    def _check_alive(self, watched: list[Process]) -> None:
        for p in watched:
            if not procs.alive(p):
                raise LabError(f"{p.name} exited during start-up: {log_tail(p.log)} (log: {p.log})")

    def _wait_http(self, what: str, watched: list[Process], netns: str | None, host: str,
                   port: int, path: str, timeout: float, tls: object = None) -> None:
        def ok() -> bool:
            self._check_alive(watched)
            status, _ = http_status(netns, host, port, path, tls=tls)  # type: ignore[arg-type]
            return status == 200

        try:
            poll_until(ok, timeout=timeout, interval=0.1, description=f"{what} to answer {path}",
                       retry_on=(OSError,))
        except LabError:
            raise
        except Exception as exc:
            tail = log_tail(watched[0].log)
            raise LabError(f"{what} did not become ready: {exc}; log: {tail}") from exc

    def api(self) -> RawApi:
        return RawApi(api_client(self.dir.kubeconfig))

    def _wait_nodes_ready(self, state: LabState, nodes: list[topo.Node], timeout: float) -> None:
        api = self.api()
        agents = [state.processes[k] for n in nodes for k in node_keys(n) if k in state.processes]
        names = {n.name for n in nodes}

        def ready() -> bool:
            self._check_alive(agents)
            listing = api.get("/api/v1/nodes")
            good = {
                item["metadata"]["name"] for item in listing.get("items", [])
                if item.get("spec", {}).get("podCIDR") and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in item.get("status", {}).get("conditions", []))
            }
            if not names <= good:
                return False
            for n in nodes:
                status, _ = http_status(n.netns, n.ip, 10256, "/healthz")
                if status != 200:
                    return False
                status, _ = http_status(n.netns, "127.0.0.1", controlplane.KUBELET_HEALTHZ_PORT, "/healthz")
                if status != 200:
                    return False
            api.get("/api/v1/namespaces/default/serviceaccounts/default")
            return True

        try:
            poll_until(ready, timeout=timeout, interval=0.2,
                       description=f"{len(nodes)} nodes Ready with kube-proxy and the kubelet API healthy")
        except LabError:
            raise
        except Exception as exc:
            tails = "; ".join(f"{p.name}: {log_tail(p.log, 2)}" for p in agents)
            raise LabError(f"nodes did not become ready: {exc}; {tails}") from exc

    # --- down ----------------------------------------------------------------------------
    def down(self) -> bool:
        """Remove everything the lab recorded; False when there was no lab."""
        if not self.dir.root.exists():
            return False
        try:
            state: LabState | None = self.dir.read()
        except LabError:
            state = None
        if state is not None:
            agents = [p for k, p in state.processes.items() if k.startswith("agent-")]
            procs.stop(agents, grace=0)
            if state.node_runtime == CONTAINERD:
                for node in topo.nodes(state.nodes):
                    try:
                        self._stop_real_node(state, node)
                        realnode.remove(self._node_paths(node))
                    except LabError as exc:  # the rest goes all the same; say what stays
                        self.progress(f"{node.name} not fully removed: {exc}")
                machine.release(str(self.dir.root))
            sandboxes = self.dir.recorded_sandboxes()
            for netns in [*state.namespaces, *sandboxes]:
                ns.kill_processes(netns)
            procs.stop(list(state.processes.values()), grace=5)
            for netns in sandboxes:
                ns.del_netns(netns)
            for netns in reversed(state.namespaces):
                ns.del_netns(netns)
        shutil.rmtree(self.dir.root, ignore_errors=True)
        return True

    def leftover(self) -> bool:
        """Whether a lab is recorded but none of its recorded processes runs any more.

        What a killed run or a restarted machine leaves: its namespaces and state remain, and
        nothing in it can answer. A lab with even one process left (a node killed on purpose,
        say) is someone's lab, not a leftover; neither is one still being written, which has
        no process recorded yet.
        """
        try:
            state = self.dir.read()
        except LabError:
            return False
        return bool(state.processes) and not any(procs.alive(p) for p in state.processes.values())

    def replace_leftover(self) -> bool:
        """Remove a leftover lab (see ``leftover``), saying so; False when there is none."""
        if not self.leftover():
            return False
        self.progress(f"the lab recorded in {self.dir.root} is a leftover (none of its processes runs): "
                      "removing it")
        self.down()
        return True

    # --- nodes ---------------------------------------------------------------------------
    def kill_node(self, name: str) -> None:
        """Make a node die as a VM does: everything on it stops, its cable goes dead."""
        state = self.dir.read()
        node = topo.node_by_name(name, state.nodes)
        if state.node_runtime == CONTAINERD:
            self._stop_real_node(state, node)
        agent = state.processes.get(agent_key(node))
        if agent is not None:
            procs.signal_process(agent, signal.SIGKILL)
        for netns in [node.netns, *self.dir.recorded_sandboxes(node.name)]:
            ns.kill_processes(netns)
        network.set_node_link(node, up=False)
        self.progress(f"{name} killed")

    def start_node(self, name: str) -> None:
        state = self.dir.read()
        node = topo.node_by_name(name, state.nodes)
        if any(procs.alive(state.processes[k]) for k in node_keys(node) if k in state.processes):
            raise LabError(f"{name} is running already: kill it first with 'lbconform lab node kill {name}'")
        network.reset_node_addresses(node)
        network.set_node_link(node, up=True)
        if state.node_runtime == CONTAINERD:
            self._start_real_nodes(state, [node], images.ensure(lb=state.lb))
        else:
            self._start_agent(state, node)
        self._wait_nodes_ready(state, [node], NODE_RESTART_READY_SECONDS)
        self.progress(f"{name} is Ready")

    # --- the reference LB ----------------------------------------------------------------
    def restart_lb(self) -> None:
        """Stop the reference LB's process (SIGTERM, as a Deployment's rollout does) and start a
        new one, which starts from the state the old one saved; returns once it has rendered its
        rules. Its nftables rules stay in the kernel meanwhile, as a cloud LB's data plane runs on
        while its controller restarts."""
        state = self.dir.read()
        if state.lb != REFERENCE_LB:
            raise LabError(f"the lab runs {state.lb}, not the reference LB: restart it through its provider")
        old = state.processes.get("lb")
        if old is None or not procs.alive(old):
            raise LabError("the reference LB is not running: see 'lbconform lab status'")
        procs.stop([old])
        self._spawn_lb(state)
        self.progress("the reference LB restarted")

    # --- status --------------------------------------------------------------------------
    def status(self) -> LabStatus:
        if not self.dir.exists():
            return LabStatus(running=False, lab_dir=self.dir.root)
        state = self.dir.read()
        st = LabStatus(running=True, lab_dir=self.dir.root, api_port=state.api_port,
                       processes={k: procs.alive(p) for k, p in state.processes.items()})
        items: list[dict[str, Any]] = []
        if any(st.processes.values()):  # a leftover has no apiserver to ask
            try:
                items = self.api().get("/api/v1/nodes").get("items", [])
            except Exception as exc:
                st.api_error = str(exc)
        by_name = {i["metadata"]["name"]: i for i in items}
        for node in topo.nodes(state.nodes):
            item = by_name.get(node.name, {})
            ready = next((c["status"] for c in item.get("status", {}).get("conditions", [])
                          if c["type"] == "Ready"), "absent")
            running = any(st.processes.get(k, False) for k in node_keys(node))
            st.nodes.append(NodeStatus(node.name, running, ready,
                                       item.get("spec", {}).get("podCIDR", "")))
        return st


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LBCONFORM_CACHE"] = str(cache_root())
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
