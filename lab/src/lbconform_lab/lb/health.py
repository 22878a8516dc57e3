"""Health checks as cloud load balancers run them: a probe of each target on an interval, with a
timeout, and per Service and backend healthy/unhealthy thresholds over the probe's results. A
backend starts unhealthy and needs ``healthy-threshold`` passes, as a new backend does on GCP and
Azure.

A target probed with the same interval and timeout for several Services is probed once for all of
them (``Probes``), as GCP's one health check of every node's kube-proxy serves all the cluster's
Services of policy Cluster: a lab run makes dozens of such Services, and with sixty of them a
probe per Service and node ran 190 threads and took 1.93 s of CPU per 20 s here (shared: 9
threads, 0.48 s). Each Service
still judges the results by its own thresholds (``Checker``), from the first result after it
subscribed: a new Service's backend needs its passes whatever others found.
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lbconform_lab.lb.model import HealthTarget
from lbconform_lab.lb.params import Params

log = logging.getLogger(__name__)


@dataclass
class Health:
    """The state one backend is in, as the LB sees it."""

    healthy: bool = False
    since: float = field(default_factory=time.time)
    last_result: str = "not checked yet"
    checks: int = 0
    transitions: int = 0
    #: Whether the backend was ever found unhealthy: ``unhealthy-threshold`` failed checks in a
    #: row (the never-healthy-again defect reads it).
    found_unhealthy: bool = False


def check_once(target: HealthTarget, timeout: float) -> tuple[bool, str]:
    try:
        if target.protocol == "tcp":
            with socket.create_connection((target.ip, target.port), timeout=timeout):
                return True, "tcp connect ok"
        conn = http.client.HTTPConnection(target.ip, target.port, timeout=timeout)
        try:
            conn.request("GET", target.path, headers={"User-Agent": "lbconform-lab-lb/health"})
            status = conn.getresponse().status
        finally:
            conn.close()
        return 200 <= status < 300, f"HTTP {status}"
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"


#: What makes two health checks the same probe: the target, the interval and the timeout.
ProbeKey = tuple[HealthTarget, float, float]


class Checker:
    """One Service's judgement of one backend: its thresholds over the results of the target's
    probe. ``changed`` is called (from the probe's thread) when the backend flips."""

    def __init__(self, name: str, target: HealthTarget, params: Params, changed: Callable[[], None],
                 healthy: bool = False) -> None:
        """``healthy``: the backend starts healthy (an LB restarted finds it so), else unhealthy."""
        self.name = name
        self.target = target
        self.params = params
        self.changed = changed
        self.state = Health(healthy=healthy)
        self._run_len = 0
        self._run_ok = False

    @property
    def key(self) -> ProbeKey:
        return self.target, self.params.hc_interval, self.params.hc_timeout

    def record(self, ok: bool, result: str) -> None:
        """One probe's result."""
        st = self.state
        st.checks += 1
        st.last_result = result
        self._run_len = self._run_len + 1 if ok == self._run_ok else 1
        self._run_ok = ok
        threshold = self.params.hc_healthy if ok else self.params.hc_unhealthy
        st.found_unhealthy = st.found_unhealthy or (not ok and self._run_len >= threshold)
        if ok != st.healthy and self._run_len >= threshold:
            st.healthy = ok
            st.since = time.time()
            st.transitions += 1
            log.info("%s %s:%d %s (%s)", self.name, self.target.ip, self.target.port,
                     "healthy" if ok else "unhealthy", result)
            self.changed()


class Prober(threading.Thread):
    """Probes one target on an interval until stopped, and gives each result to the checkers
    subscribed at the time."""

    def __init__(self, key: ProbeKey) -> None:
        target, interval, timeout = key
        super().__init__(name=f"probe-{target.protocol}://{target.ip}:{target.port}{target.path}",
                         daemon=True)
        self.target, self.interval, self.timeout = target, interval, timeout
        self.checkers: list[Checker] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            ok, result = check_once(self.target, self.timeout)
            with self.lock:
                for c in self.checkers:
                    c.record(ok, result)
            self.stopped.wait(max(0.0, self.interval - (time.monotonic() - started)))


class Probes:
    """The LB's probes, one per ``ProbeKey`` that some checker needs; a probe starts with its first
    checker (and probes at once) and stops with its last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probers: dict[ProbeKey, Prober] = {}

    def subscribe(self, checker: Checker) -> None:
        with self._lock:
            prober = self._probers.get(checker.key)
            if prober is None:
                prober = self._probers[checker.key] = Prober(checker.key)
                prober.start()
            with prober.lock:
                prober.checkers.append(checker)

    def unsubscribe(self, checker: Checker) -> None:
        """The checker gets no more results (none after this returns)."""
        with self._lock:
            prober = self._probers.get(checker.key)
            if prober is None:
                return
            with prober.lock:
                if checker in prober.checkers:
                    prober.checkers.remove(checker)
                if not prober.checkers:
                    prober.stopped.set()
                    del self._probers[checker.key]

    def count(self) -> int:
        """How many targets are being probed."""
        with self._lock:
            return len(self._probers)
