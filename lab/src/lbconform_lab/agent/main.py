"""The agent process: wiring of node heart, supervision of kube-proxy and the kubelet API
server (lab-kubelet), and pod workers.

Run as ``python -m lbconform_lab.agent --node NAME --lab-dir DIR`` inside the node's
network namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lbconform.errors import BuildError
from lbconform.kube.informer import Informer
from lbconform.kube.rawapi import ApiError, Json, RawApi, api_client
from lbconform_lab import build, controlplane
from lbconform_lab import topology as topo
from lbconform_lab.agent import registry
from lbconform_lab.agent.envsources import NodeResources
from lbconform_lab.agent.ipam import PodIPAM
from lbconform_lab.agent.node import NodeHeart, announce_pod_cidr
from lbconform_lab.agent.objects import ObjectCache
from lbconform_lab.agent.pods import PodWorker
from lbconform_lab.agent.sandbox import destroy_recorded
from lbconform_lab.agent.tokens import TokenManager
from lbconform_lab.state import LabDir

log = logging.getLogger("lbconform_lab.agent")

#: How long the agent waits for node IPAM to give its node a podCIDR.
POD_CIDR_TIMEOUT_SECONDS = 60.0
#: kube-proxy and lab-kubelet are restarted this long after they exit (kube-proxy exits on
#: purpose when its Node changes).
DAEMON_RESTART_SECONDS = 1.0


class Agent:
    """One node's kubelet stand-in."""

    def __init__(self, node: topo.Node, labdir: LabDir, peers: list[str]) -> None:
        self.node = node
        self.labdir = labdir
        self.peers = peers
        self.nodedir = labdir.node_dir(node.name)
        self.api = RawApi(api_client(self.nodedir / "kubeconfig"))
        self.heart = NodeHeart(self.api, node)
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.ipam: PodIPAM
        #: What pods' volumes and env read: their objects, tokens, and the node's allocatable.
        self.objects = ObjectCache(self.api)
        self.tokens = TokenManager(self.api)
        self.resources = NodeResources.of_machine()

    # --- used by pod workers -----------------------------------------------------------
    def forget(self, uid: str) -> None:
        with self.lock:
            self.workers.pop(uid, None)

    def event(self, pod: Json, reason: str, message: str, kind: str = "Normal") -> None:
        meta = pod["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                               "uid": meta["uid"], "apiVersion": "v1"},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": "kubelet", "host": self.node.name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except Exception as exc:
            log.debug("event %s for %s not recorded: %s", reason, meta["name"], exc)

    # --- main ---------------------------------------------------------------------------
    def run(self) -> None:
        destroy_recorded(self.labdir.sandboxes_dir(self.node.name))
        threading.Thread(target=self._supervise_kubelet_api, daemon=True, name="lab-kubelet").start()
        node_obj = self.heart.register()
        pod_cidr = self.heart.wait_for_pod_cidr(POD_CIDR_TIMEOUT_SECONDS)
        self.ipam = PodIPAM(pod_cidr)
        announce_pod_cidr(self.node, pod_cidr, self.peers)
        log.info("node %s has podCIDR %s", self.node.name, pod_cidr)
        threading.Thread(target=self._supervise_kube_proxy, daemon=True, name="kube-proxy").start()
        threading.Thread(target=self.heart.heartbeat_forever, args=(node_obj["metadata"]["uid"],),
                         daemon=True, name="heartbeat").start()
        self._watch_pods()

    def _supervise_kube_proxy(self) -> None:
        argv = controlplane.kube_proxy_args(
            build.binary("kube-proxy"), self.nodedir / "kube-proxy.kubeconfig", self.node)
        self._supervise("kube-proxy", argv)

    def _supervise_kubelet_api(self) -> None:
        """Serve the kubelet's API (logs, exec, attach, port-forward) for this node's pods: the
        lab-kubelet server reads the pod registry the pod workers publish."""
        try:
            binary = build.binary("lab-kubelet")
        except BuildError as exc:
            log.error("no kubelet API on %s: %s", self.node.name, exc)
            return
        crt, _ = self.labdir.kubelet_serving(self.node.name)
        if not crt.is_file():
            log.error("no kubelet API on %s: its certificate %s is missing (the lab was booted "
                      "before the kubelet API existed: boot it again)", self.node.name, crt)
            return
        self._supervise("lab-kubelet", controlplane.lab_kubelet_args(
            binary, self.node, self.labdir, registry.pods_dir(self.nodedir)))

    def _supervise(self, name: str, argv: list[str]) -> None:
        """Run a node daemon for as long as the agent lives, restarting it when it exits; its
        pid is in ``<node dir>/<name>.pid``, its output in ``<lab logs>/<name>-<node>.log``."""
        logfile = self.labdir.logs / f"{name}-{self.node.name}.log"
        while True:
            with open(logfile, "ab") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            (self.nodedir / f"{name}.pid").write_text(str(proc.pid))
            code = proc.wait()
            log.warning("%s exited with %s; restarting", name, code)
            time.sleep(DAEMON_RESTART_SECONDS)

    def _dispatch(self, kind: str, pod: Json) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker is not None:
                    worker.deleted()
                return
            if worker is not None:
                worker.update(pod)
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                if pod["metadata"].get("deletionTimestamp"):
                    self._final_delete(pod)
                return
            worker = PodWorker(self, pod)
            self.workers[uid] = worker
        worker.start()

    def _final_delete(self, pod: Json) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})

    def _watch_pods(self) -> None:
        pods = Informer(self.api, "/api/v1/pods", self._dispatch,
                        fieldSelector=f"spec.nodeName={self.node.name}")
        pods.start()
        pods.join()

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lbconform-lab-agent")
    parser.add_argument("--node", required=True)
    parser.add_argument("--nodes", type=int, required=True, help="how many nodes the lab has")
    parser.add_argument("--lab-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    # Container runtimes give containers a high open-files limit; backends holding thousands of
    # connections (the traffic bench, the fleets) need it too, and inherit it from the agent.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    node = topo.node_by_name(args.node, args.nodes)
    peers: list[Any] = [topo.FABRIC_NS, topo.LB_NS] + [n.netns for n in topo.nodes(args.nodes)]
    Agent(node, LabDir(args.lab_dir), peers).run()
    return 0
