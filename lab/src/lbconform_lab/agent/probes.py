"""Container probes and lifecycle handlers, as the kubelet runs them.

A probe is run from the node's namespace (where the agent lives), against the pod's IP,
exactly as the kubelet probes from the host. ``ProbeWorker`` applies period, initial delay,
timeout and the success and failure thresholds.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lbconform.nsexec import in_netns
from lbconform_lab.agent.images import command_argv
from lbconform_lab.agent.rootfs import exec_argv

log = logging.getLogger(__name__)

Json = Mapping[str, Any]


def resolve_port(port: int | str, container: Json) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')} has no port named {port!r}")


def http_get(handler: Json, pod_ip: str, container: Json, timeout: float) -> tuple[bool, str]:
    """An httpGet probe or hook: success is a status from 200 to 399."""
    host = handler.get("host") or pod_ip
    port = resolve_port(handler["port"], container)
    path = handler.get("path") or "/"
    if handler.get("scheme", "HTTP").upper() == "HTTPS":
        ctx = ssl._create_unverified_context()  # the kubelet does not verify probe certificates
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ctx
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {h["name"]: h["value"] for h in handler.get("httpHeaders") or []}
    headers.setdefault("User-Agent", "kube-probe/lab")
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read(10240)
        ok = 200 <= resp.status < 400
        return ok, f"HTTP probe failed with statuscode: {resp.status}" if not ok else ""
    except (OSError, http.client.HTTPException) as exc:
        return False, f"Get \"http://{host}:{port}{path}\": {exc}"
    finally:
        conn.close()


def tcp_connect(handler: Json, pod_ip: str, container: Json, timeout: float) -> tuple[bool, str]:
    host = handler.get("host") or pod_ip
    port = resolve_port(handler["port"], container)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"dial tcp {host}:{port}: {exc}"


def run_exec(
    command: list[str], netns: str | None, env: Mapping[str, str], timeout: float, pid: int | None = None
) -> tuple[bool, str]:
    """Run a command inside the container whose process is ``pid`` (its network, mount and UTS
    namespaces), or in the pod's network namespace before it has one; success is exit status 0."""
    argv = exec_argv(pid, command_argv(command)) if pid else in_netns(netns, command_argv(command))
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True,
            timeout=timeout, env=dict(env), check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {timeout:g}s"
    except OSError as exc:
        return False, str(exc)
    out = (proc.stdout + proc.stderr).strip()[-200:]
    return proc.returncode == 0, out if proc.returncode else ""


class ProbeTarget:
    """Where and how to run handlers for one container."""

    def __init__(self, pod_ip: Callable[[], str], netns: str | None, container: Json,
                 env: Callable[[], Mapping[str, str]], pid: Callable[[], int | None] = lambda: None) -> None:
        self.pod_ip = pod_ip
        self.netns = netns
        self.container = container
        self.env = env
        self.pid = pid

    def run(self, handler: Json, timeout: float) -> tuple[bool, str]:
        if "httpGet" in handler:
            return http_get(handler["httpGet"], self.pod_ip(), self.container, timeout)
        if "tcpSocket" in handler:
            return tcp_connect(handler["tcpSocket"], self.pod_ip(), self.container, timeout)
        if "exec" in handler:
            return run_exec(list(handler["exec"]["command"]), self.netns, self.env(), timeout, self.pid())
        if "grpc" in handler:
            return False, "grpc probes are not supported by the lab"
        return False, "handler has no action"


class ProbeWorker(threading.Thread):
    """Runs one probe of one container on its period and keeps its thresholded result."""

    def __init__(self, kind: str, probe: Json, target: ProbeTarget,
                 gate: Callable[[], bool], on_change: Callable[[], None]) -> None:
        super().__init__(name=f"probe-{kind}-{target.container.get('name')}", daemon=True)
        self.kind = kind
        self.probe = probe
        self.target = target
        self.gate = gate
        self.on_change = on_change
        self.stopped = threading.Event()
        # Readiness starts failing; liveness and startup start as "not failed yet".
        self.result: bool | None = False if kind == "readiness" else None
        self.last_message = ""
        self._successes = 0
        self._failures = 0

    @property
    def period(self) -> float:
        return float(self.probe.get("periodSeconds", 10))

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        delay = float(self.probe.get("initialDelaySeconds", 0))
        if self.stopped.wait(delay):
            return
        timeout = float(self.probe.get("timeoutSeconds", 1))
        success_threshold = int(self.probe.get("successThreshold", 1))
        failure_threshold = int(self.probe.get("failureThreshold", 3))
        while not self.stopped.is_set():
            started = time.monotonic()
            if self.gate():
                ok, message = self.target.run(self.probe, timeout)
                if self.stopped.is_set():
                    return
                self._record(ok, message, success_threshold, failure_threshold)
            self.stopped.wait(max(0.0, self.period - (time.monotonic() - started)))

    def _record(self, ok: bool, message: str, success_threshold: int, failure_threshold: int) -> None:
        if ok:
            self._successes += 1
            self._failures = 0
            new: bool | None = (
                True if self._successes >= success_threshold or self.result is None else self.result
            )
        else:
            self._failures += 1
            self._successes = 0
            new = False if self._failures >= failure_threshold else self.result
            self.last_message = message
        if new != self.result:
            log.info("%s probe of %s: %s %s", self.kind, self.target.container.get("name"),
                     "success" if new else "failure", message)
            self.result = new
            self.on_change()
