"""Health checks as cloud load balancers run them: one checker per backend, on an interval,
with a timeout and healthy/unhealthy thresholds. A backend starts unhealthy and needs
``healthy-threshold`` passes, as a new backend does on GCP and Azure."""

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


class Checker(threading.Thread):
    """Checks one backend until stopped; calls ``changed`` when it flips."""

    def __init__(self, name: str, target: HealthTarget, params: Params, changed: Callable[[], None],
                 healthy: bool = False) -> None:
        """``healthy``: the backend starts healthy (an LB restarted finds it so), else unhealthy."""
        super().__init__(name=f"hc-{name}", daemon=True)
        self.target = target
        self.params = params
        self.changed = changed
        self.state = Health(healthy=healthy)
        self.stopped = threading.Event()
        self._run_len = 0
        self._run_ok = False

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            ok, result = check_once(self.target, self.params.hc_timeout)
            if self.stopped.is_set():
                return
            self._record(ok, result)
            self.stopped.wait(max(0.0, self.params.hc_interval - (time.monotonic() - started)))

    def _record(self, ok: bool, result: str) -> None:
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
            log.info("%s:%d %s (%s)", self.target.ip, self.target.port,
                     "healthy" if ok else "unhealthy", result)
            self.changed()
