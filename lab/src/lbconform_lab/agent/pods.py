"""The pod worker: one thread per pod, driving it from bound to deleted as the kubelet does.

It makes the sandbox, starts containers (init containers first), runs their probes,
restarts them per restartPolicy, reports status and conditions, and on deletion runs the
termination sequence of ``containers.Container.kill`` for all containers at once before it
removes the pod with a zero grace period, the kubelet's final delete.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import urllib3.exceptions

from lbconform.kube.rawapi import ApiError, Json
from lbconform_lab.agent import envsources, images, registry, rootfs
from lbconform_lab.agent.containers import Container, now_rfc3339
from lbconform_lab.agent.probes import ProbeTarget, ProbeWorker
from lbconform_lab.agent.sandbox import Sandbox
from lbconform_lab.agent.volumes import PodContext, PodVolumes, VolumeError

if TYPE_CHECKING:
    from pathlib import Path

    from lbconform.kube.rawapi import RawApi
    from lbconform_lab import topology as topo
    from lbconform_lab.agent.envsources import NodeResources
    from lbconform_lab.agent.ipam import PodIPAM
    from lbconform_lab.agent.objects import ObjectCache
    from lbconform_lab.agent.tokens import TokenManager
    from lbconform_lab.state import LabDir


class Agent(Protocol):
    """What a pod worker asks of its node's agent (``agent.main.Agent``, which starts the workers)."""

    node: topo.Node
    labdir: LabDir
    nodedir: Path
    api: RawApi
    ipam: PodIPAM
    objects: ObjectCache
    tokens: TokenManager
    resources: NodeResources

    def forget(self, uid: str) -> None: ...

    def event(self, pod: Json, reason: str, message: str, kind: str = "Normal") -> None: ...

log = logging.getLogger(__name__)

#: Errors of a read from the apiserver that the kubelet retries rather than dies of: a refusal
#: (403 while the node authorizer has not yet seen the pod that names a Secret, 429, 5xx) or a
#: broken connection. A pod worker that let one through would end, freezing its pod's status.
API_RETRYABLE = (ApiError, OSError, urllib3.exceptions.HTTPError)

#: How often a worker looks at its containers when nothing wakes it.
TICK_SECONDS = 0.25
#: How often a running pod's content volumes are brought up to date (objects are read through
#: a cache of about this age, so an update reaches the files within two of these).
VOLUME_SYNC_SECONDS = 2.0


class PodWorker(threading.Thread):
    """Owns one pod on this node for its whole life."""

    def __init__(self, agent: Agent, pod: Json) -> None:
        super().__init__(name=f"pod-{pod['metadata']['namespace']}/{pod['metadata']['name']}",
                         daemon=True)
        self.agent = agent
        self.pod = pod
        self.uid: str = pod["metadata"]["uid"]
        self.key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.wake = threading.Event()
        self.gone = False
        spec = pod["spec"]
        self.sandbox = Sandbox(self.uid, agent.labdir.sandboxes_dir(agent.node.name),
                               bool(spec.get("hostNetwork")), agent.node.ip)
        self.start_time = now_rfc3339()
        self.init_done = not spec.get("initContainers")
        self.containers = [self._container(c) for c in spec["containers"]]
        self.inits = [self._container(c) for c in spec.get("initContainers") or []]
        self.conditions: dict[str, tuple[str, str]] = {}
        self.last_status: Json | None = None
        self.sandbox_ready = False
        self.phase = "Pending"
        self.volumes = PodVolumes(agent.nodedir, PodContext(
            pod, "", agent.node.ip, agent.objects, agent.tokens, agent.resources))
        self.volumes_ready = False
        self._volume_message = ""
        self._volumes_synced = 0.0
        self._published: dict[str, Any] | None = None

    # --- called from the agent's watch loop ---------------------------------------------
    def update(self, pod: Json) -> None:
        self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone = True
        self.wake.set()

    # --- helpers -----------------------------------------------------------------------
    def _container(self, spec: Json) -> Container:
        previous = {s["name"]: s for s in (self.pod.get("status") or {}).get("containerStatuses") or []}
        before = previous.get(spec["name"], {})
        restarts = int(before.get("restartCount", 0))
        if before.get("containerID"):
            restarts += 1  # it ran before this agent started: a node restart restarts it
        try:
            program = images.resolve(spec.get("image", ""), spec.get("command") or [],
                                     spec.get("args") or [])
        except images.UnknownImage as exc:
            return Container(spec, None, "ErrImagePull", str(exc), restarts)
        return Container(spec, program, restart_count=restarts)

    def _env(self, c: Container) -> dict[str, str]:
        return envsources.container_env(self.pod, c.spec, self.sandbox.ip, self.agent.node.ip,
                                        self.agent.objects, self.agent.resources)

    def _probe_env(self, c: Container) -> dict[str, str]:
        try:
            return self._env(c)
        except envsources.ConfigError:
            return {}

    def _probe_target(self, c: Container) -> ProbeTarget:
        return ProbeTarget(lambda: self.sandbox.ip, self.sandbox.netns, c.spec, lambda: self._probe_env(c),
                           lambda: c.proc.pid if c.running and c.proc is not None else None)

    def _hostname(self) -> str:
        spec = self.pod["spec"]
        if spec.get("hostNetwork"):
            return str(self.agent.node.name)
        return str(spec.get("hostname") or self.pod["metadata"]["name"])[:63]

    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp"))

    def event(self, reason: str, message: str, kind: str = "Normal") -> None:
        self.agent.event(self.pod, reason, message, kind)

    # --- the worker ----------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod worker %s crashed", self.key)
        finally:
            for c in self.inits + self.containers:
                for p in c.probes.values():
                    p.stop()
            try:
                self.sandbox.destroy()
            finally:
                if self.sandbox.netns is not None and self.sandbox.ip:
                    self.agent.ipam.release(self.sandbox.ip)
                meta = self.pod["metadata"]
                registry.withdraw(self.agent.nodedir, meta["namespace"], meta["name"], self.uid)
                self.volumes.remove()
                shutil.rmtree(rootfs.pod_scratch_dir(self.agent.nodedir, self.uid), ignore_errors=True)
                self.agent.forget(self.uid)

    def _run(self) -> None:
        if self.deleting() or self.gone:
            self._finish_deletion()
            return
        previous = (self.pod.get("status") or {}).get("podIP")
        self.sandbox.create(self.agent.ipam.allocate(previous) if self.sandbox.netns else self.agent.node.ip)
        self.volumes.ctx.pod_ip = self.sandbox.ip
        self.sandbox_ready = True
        self.sync_status()
        while True:
            self.wake.wait(TICK_SECONDS)
            self.wake.clear()
            if self.gone:
                self._terminate(0)
                return
            if self.deleting():
                grace = self._deletion_grace()
                self._terminate(grace if grace is not None else
                                int(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
                self._finish_deletion()
                return
            if self._volumes():
                self._supervise()
            self.sync_status()
            self._publish()

    def _volumes(self) -> bool:
        """Set the pod's volumes up (until they can be: a FailedMount event each time the reason
        changes, as the kubelet retries), then keep their content current."""
        now = time.monotonic()
        try:
            if not self.volumes_ready:
                self.volumes.setup()
                self.volumes_ready = True
                self._volumes_synced = now
            elif now - self._volumes_synced >= VOLUME_SYNC_SECONDS:
                self._volumes_synced = now
                self.volumes.sync(self.pod)
        except (VolumeError, *API_RETRYABLE) as exc:
            if str(exc) != self._volume_message:
                self._volume_message = str(exc)
                self.event("FailedMount", str(exc), "Warning")
            log.info("pod %s: %s", self.key, exc)
        return self.volumes_ready

    def _publish(self) -> None:
        """Tell the node's kubelet API where this pod's containers and logs are, when that changed."""
        meta = self.pod["metadata"]
        record: dict[str, Any] = {
            "namespace": meta["namespace"], "name": meta["name"], "uid": self.uid,
            "netns": self.sandbox.netns, "ip": self.sandbox.ip,
            "containers": {c.name: {"pid": c.proc.pid if c.running and c.proc is not None else None,
                                    "log": str(c.log_path or ""), "previousLog": str(c.previous_log or "")}
                           for c in self.inits + self.containers},
        }
        if record != self._published:
            registry.publish(self.agent.nodedir, record)
            self._published = record

    def _policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    def _start(self, c: Container) -> None:
        if c.program is None:
            return
        if time.monotonic() < c.next_start:
            c.waiting_reason = "CrashLoopBackOff" if c.restart_count else "ContainerCreating"
            return
        try:
            env = self._env(c)
            mounts = self.volumes.mounts(c.spec)
        except (envsources.ConfigError, VolumeError, *API_RETRYABLE) as exc:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            return
        meta = self.pod["metadata"]
        log_path = (self.agent.nodedir / "logs" / f"{meta['namespace']}_{meta['name']}_{self.uid}" / c.name
                    / f"{c.restart_count}.log")
        assert c.program is not None
        argv = rootfs.container_argv(rootfs.scratch_dir(self.agent.nodedir, self.uid, c.name),
                                     self._hostname(), self.sandbox.ip, c.spec.get("workingDir") or "/",
                                     self.agent.labdir.root, mounts, c.program.argv)
        try:
            c.start(self.sandbox.netns, argv, env, log_path)
        except OSError as exc:
            c.waiting_reason, c.waiting_message = "RunContainerError", str(exc)
            self.event("Failed", f"Error: {exc}", "Warning")
            return
        self.event("Started", f"Started container {c.name}")
        self._start_probes(c)

    def _start_probes(self, c: Container) -> None:
        for p in c.probes.values():
            p.stop()
        c.probes = {}
        target = self._probe_target(c)
        for kind in ("startup", "readiness", "liveness"):
            spec = c.spec.get(f"{kind}Probe")
            if not spec:
                continue
            worker = ProbeWorker(kind, spec, target, self._probe_gate(c, kind), self.wake.set)
            c.probes[kind] = worker
            worker.start()

    @staticmethod
    def _probe_gate(c: Container, kind: str) -> Callable[[], bool]:
        """Startup probes run until they pass; the others only once startup has passed."""
        if kind == "startup":
            return lambda: c.running and c.probes["startup"].result is not True
        return lambda: c.startup_done

    def _supervise(self) -> None:
        """Start what should run, notice exits, restart per policy, act on failed probes."""
        if not self.init_done:
            self._supervise_inits()
            if not self.init_done:
                return
        restart = self._policy()
        for c in self.containers:
            if c.killing:
                continue
            if c.reap():
                self.event("Died" if c.exit_code else "Completed",
                           f"container {c.name} exited with {c.exit_code}")
                if restart == "Always" or (restart == "OnFailure" and c.exit_code != 0):
                    c.schedule_restart()
            if c.proc is None:
                self._start(c)
            elif c.exit_code is not None:
                if c.next_start and time.monotonic() >= c.next_start:
                    c.archive_for_restart()
                    c.restart_count += 1
                    self._start(c)
            else:
                self._check_liveness(c)

    def _check_liveness(self, c: Container) -> None:
        for kind in ("liveness", "startup"):
            probe = c.probes.get(kind)
            if probe is not None and probe.result is False:
                self.event("Unhealthy", f"{kind.capitalize()} probe failed: {probe.last_message}",
                           "Warning")
                self._restart_after_kill(c, kind)
                return

    def _restart_after_kill(self, c: Container, kind: str) -> None:
        probe_grace = (c.spec.get(f"{kind}Probe") or {}).get("terminationGracePeriodSeconds")
        grace = int(probe_grace if probe_grace is not None else
                    self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        self.event("Killing", f"Container {c.name} failed {kind} probe, will be restarted")

        def kill_and_restart() -> None:
            c.kill(grace, self._probe_target(c))
            c.schedule_restart()
            c.killing = False
            self.wake.set()

        threading.Thread(target=kill_and_restart, daemon=True).start()

    def _supervise_inits(self) -> None:
        for c in self.inits:
            if c.exit_code == 0:
                continue
            if c.proc is None:
                self._start(c)
                return
            if not c.reap():
                return
            if c.exit_code != 0:
                if self._policy() == "Never":
                    self.phase = "Failed"
                    return
                c.schedule_restart()
                c.archive_for_restart()
                c.restart_count += 1
                c.proc = None
                return
        self.init_done = True

    # --- termination -------------------------------------------------------------------
    def _terminate(self, grace: int) -> None:
        self.event("Killing", f"Stopping containers with a grace period of {grace}s")
        killers = []
        for c in self.containers + self.inits:
            if c.running:
                t = threading.Thread(target=c.kill, args=(grace, self._probe_target(c)), daemon=True)
                t.start()
                killers.append(t)
        while any(t.is_alive() for t in killers):
            self.wake.wait(TICK_SECONDS)
            self.wake.clear()
            shorter = self._deletion_grace()
            if shorter is not None and shorter < grace:
                grace = shorter
                for c in self.containers + self.inits:
                    c.shorten(grace)
            if not self.gone:
                self.sync_status()
        for c in self.containers:
            c.reap()
        codes = [c.exit_code for c in self.containers if c.exit_code is not None]
        self.phase = "Succeeded" if codes and all(x == 0 for x in codes) else "Failed"
        self.sync_status(final=True)

    def _deletion_grace(self) -> int | None:
        """The grace period the API now asks for: zero once the pod object is gone (a force delete)."""
        if self.gone:
            return 0
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        return None if grace is None else int(grace)

    def _finish_deletion(self) -> None:
        """The kubelet's last word: delete the pod object with grace period zero."""
        if self.gone:
            return
        meta = self.pod["metadata"]
        try:
            self.agent.api.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("final delete of %s failed: %s", self.key, exc)

    # --- status ------------------------------------------------------------------------
    def _condition(self, kind: str, ok: bool) -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = self.conditions.get(kind)
        if prev is None or prev[0] != status:
            self.conditions[kind] = (status, now_rfc3339())
        return {"type": kind, "status": status, "lastTransitionTime": self.conditions[kind][1],
                "lastProbeTime": None}

    def _phase(self) -> str:
        if self.phase in ("Succeeded", "Failed"):
            return self.phase
        if not self.init_done or all(c.proc is None for c in self.containers):
            return "Pending"
        policy = self._policy()
        if policy != "Always" and all(c.exit_code is not None for c in self.containers):
            failed = any(c.exit_code != 0 for c in self.containers)
            if policy == "Never" or not failed:
                self.phase = "Failed" if failed else "Succeeded"
                return self.phase
        return "Running"

    def sync_status(self, final: bool = False) -> None:
        ready = self.init_done and all(c.ready for c in self.containers)
        if final:
            ready = False
        ip = self.sandbox.ip
        status: dict[str, Any] = {
            "phase": self._phase(),
            "hostIP": self.agent.node.ip, "hostIPs": [{"ip": self.agent.node.ip}],
            "startTime": self.start_time,
            "conditions": [
                self._condition("PodReadyToStartContainers", self.sandbox_ready and not final),
                self._condition("Initialized", self.init_done),
                self._condition("ContainersReady", ready),
                self._condition("Ready", ready),
            ],
            "containerStatuses": [c.status(c.spec.get("image", "")) for c in self.containers],
        }
        if self.inits:
            status["initContainerStatuses"] = [c.status(c.spec.get("image", "")) for c in self.inits]
        if ip and self.sandbox_ready:
            status["podIP"] = ip
            status["podIPs"] = [{"ip": ip}]
        if status == self.last_status:
            return
        meta = self.pod["metadata"]
        try:
            self.agent.api.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"metadata": {"uid": self.uid}, "status": status},
            )
            self.last_status = status
        except ApiError as exc:
            if exc.status == 404:
                self.gone = True
            else:
                log.warning("status update of %s failed: %s", self.key, exc)
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # tried again at the next change or tick
            log.warning("status update of %s failed: %s", self.key, exc)
