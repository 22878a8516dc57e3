"""The load shape of a chaos run: ramp, hold, chaos window, and an optional recovery hold.

Load it next to a user's locustfile (``locust -f http_keepalive.py,shapes.py``); the shape
runs on the master (or the standalone process) and ends the run when its last phase is over.

    ramp      users are started at the spawn rate, up to ``LBCONFORM_USERS``
    hold      steady load: the baseline every chaos result is compared with
    chaos     steady load while the harness runs its chaos (kill a node, roll a deployment)
    recover   steady load after the chaos, to see the load balancer settle (0 s: no phase)

The phases the shape enters, with wall-clock times, are written to ``LBCONFORM_PHASES_FILE``
(and ``end`` when the last is over): the harness starts its chaos when ``chaos`` appears
(``LoadRun.wait_for_phase``), and failures can be told apart by phase afterwards (Locust's
stats history CSV has one row per second to match them against). Locust ticks a shape about
once a second, so a boundary is accurate to that.

Environment variables (all optional):

``LBCONFORM_USERS``            users during every phase after the ramp (default 10)
``LBCONFORM_SPAWN_RATE``       users started per second (default: all of them within the ramp)
``LBCONFORM_RAMP_SECONDS``     default 5
``LBCONFORM_HOLD_SECONDS``     default 10
``LBCONFORM_CHAOS_SECONDS``    default 30
``LBCONFORM_RECOVER_SECONDS``  default 0
``LBCONFORM_PHASES_FILE``      JSON lines ``{"phase": ..., "at": <unix time>, "users": ...}``; unset, none
"""

from __future__ import annotations

import json
import logging
import os
import time

from locust import LoadTestShape

log = logging.getLogger(__name__)

PHASES = ("ramp", "hold", "chaos", "recover")


def _seconds(name: str, default: float) -> float:
    value = float(os.environ.get(name, default))
    if value < 0:
        raise ValueError(f"{name}={value}: must not be negative")
    return value


class ChaosWindowShape(LoadTestShape):
    def __init__(self) -> None:
        super().__init__()
        self.users = int(os.environ.get("LBCONFORM_USERS", "10"))
        self.durations = {
            "ramp": _seconds("LBCONFORM_RAMP_SECONDS", 5),
            "hold": _seconds("LBCONFORM_HOLD_SECONDS", 10),
            "chaos": _seconds("LBCONFORM_CHAOS_SECONDS", 30),
            "recover": _seconds("LBCONFORM_RECOVER_SECONDS", 0),
        }
        ramp = self.durations["ramp"]
        default_rate = self.users / ramp if ramp > 0 else self.users
        self.spawn_rate = float(os.environ.get("LBCONFORM_SPAWN_RATE", default_rate))
        self.phases_file = os.environ.get("LBCONFORM_PHASES_FILE", "")
        self.current: str | None = None

    def phase_at(self, run_time: float) -> str | None:
        """The phase ``run_time`` seconds after the start falls in; None once all are over."""
        end = 0.0
        for name in PHASES:
            end += self.durations[name]
            if run_time < end:
                return name
        return None

    def tick(self) -> tuple[int, float] | None:
        phase = self.phase_at(self.get_run_time())
        if phase != self.current:
            self._entered(phase)
        return None if phase is None else (self.users, self.spawn_rate)

    def _entered(self, phase: str | None) -> None:
        self.current = phase
        name = phase or "end"
        log.info("load shape: %s", name)
        if self.phases_file:
            with open(self.phases_file, "a") as out:
                out.write(json.dumps({"phase": name, "at": time.time(), "users": self.users}) + "\n")
