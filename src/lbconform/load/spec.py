"""What a load run is: which locustfile, against which address, how many users, for how long.

A ``LoadSpec`` is a value, so that a suite can state its load in one line and a report can
record it. It knows the command-line options and the environment its Locust processes get
(the locustfiles read their settings from ``LBCONFORM_*`` variables, so a worker pod gets the
same settings through its spec). ``ChaosShape`` replaces users, spawn rate and run time by
the ramp / hold / chaos window phases of ``locustfiles/shapes.py``; ``Distributed`` makes the
run a master whose workers are local processes, pods someone else starts, or both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lbconform.load.locustfiles import SHAPES, locustfile

__all__ = ["ChaosShape", "Distributed", "LoadSpec"]


@dataclass(frozen=True)
class ChaosShape:
    """Ramp to ``users``, hold, then hold through the chaos window (and optionally after it).

    The harness starts its chaos ``chaos_starts_after`` seconds after the run began; the
    phases the shape actually entered come back in ``LoadResult.phases``.
    """

    users: int
    ramp_seconds: float = 5.0
    hold_seconds: float = 10.0
    chaos_seconds: float = 30.0
    recover_seconds: float = 0.0
    #: Users started per second; None starts all of them within the ramp.
    spawn_rate: float | None = None

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users {self.users}: must be at least 1")
        for name in ("ramp_seconds", "hold_seconds", "chaos_seconds", "recover_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} {getattr(self, name)}: must not be negative")

    @property
    def chaos_starts_after(self) -> float:
        return self.ramp_seconds + self.hold_seconds

    @property
    def total_seconds(self) -> float:
        return self.ramp_seconds + self.hold_seconds + self.chaos_seconds + self.recover_seconds

    def environment(self) -> dict[str, str]:
        env = {
            "LBCONFORM_USERS": str(self.users),
            "LBCONFORM_RAMP_SECONDS": f"{self.ramp_seconds:g}",
            "LBCONFORM_HOLD_SECONDS": f"{self.hold_seconds:g}",
            "LBCONFORM_CHAOS_SECONDS": f"{self.chaos_seconds:g}",
            "LBCONFORM_RECOVER_SECONDS": f"{self.recover_seconds:g}",
        }
        if self.spawn_rate is not None:
            env["LBCONFORM_SPAWN_RATE"] = f"{self.spawn_rate:g}"
        return env


@dataclass(frozen=True)
class Distributed:
    """A master that waits for ``expect_workers`` workers, ``local_workers`` of which it starts.

    The rest (pods from manifests/locust-worker.yaml) are the caller's to start; they must
    reach ``bind_host:bind_port``. The master gives up, and the run fails, when not all have
    connected within ``worker_wait_seconds``.
    """

    expect_workers: int
    local_workers: int = 0
    bind_host: str = "127.0.0.1"
    bind_port: int = 5557
    worker_wait_seconds: int = 60

    def __post_init__(self) -> None:
        if self.expect_workers < 1 or not 0 <= self.local_workers <= self.expect_workers:
            raise ValueError(f"expect {self.expect_workers} workers, {self.local_workers} of them local: "
                             "need 1 <= local <= expected")

    @property
    def worker_master_host(self) -> str:
        """The address local workers connect to (a wildcard bind is reached on loopback)."""
        return "127.0.0.1" if self.bind_host in ("*", "0.0.0.0", "") else self.bind_host


@dataclass(frozen=True)
class LoadSpec:
    """One load run. ``locustfile`` is a stem in locustfiles/ or a path; ``host`` a URL.

    With a ``shape``, the shape's users and phases replace ``users``, ``spawn_rate`` and
    ``run_seconds``.
    """

    locustfile: str | Path
    host: str
    users: int = 10
    #: Users started per second; None starts all at once.
    spawn_rate: float | None = None
    #: Whole seconds: Locust's ``--run-time`` takes no fractions.
    run_seconds: int = 10
    shape: ChaosShape | None = None
    #: Requests per second each user sends (``LBCONFORM_USER_RATE``).
    user_rate: float = 10.0
    #: Seconds to connect, and to wait for an answer (``LBCONFORM_TIMEOUT``).
    request_timeout: float = 3.0
    path: str = "/hostname"
    #: Seconds Locust lets users finish their request when the run stops (``--stop-timeout``).
    stop_timeout: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if "://" not in self.host:
            raise ValueError(f"host {self.host!r}: use a URL such as http://198.18.0.1:80")
        if self.users < 1 or self.run_seconds <= 0 or self.user_rate <= 0 or self.request_timeout <= 0:
            raise ValueError("users, run_seconds, user_rate and request_timeout must be positive")

    @property
    def duration(self) -> float:
        """How long the load runs once it started (the shape's phases, or ``run_seconds``)."""
        return self.shape.total_seconds if self.shape is not None else self.run_seconds

    def locustfiles(self) -> list[Path]:
        """The files Locust loads: the user's, and the shape's when there is one."""
        files = [locustfile(self.locustfile)]
        if self.shape is not None:
            files.append(locustfile(SHAPES))
        return files

    def environment(self) -> dict[str, str]:
        """The ``LBCONFORM_*`` settings every process of the run (and every worker pod) gets."""
        env = {
            "LBCONFORM_PATH": self.path,
            "LBCONFORM_TIMEOUT": f"{self.request_timeout:g}",
            "LBCONFORM_USER_RATE": f"{self.user_rate:g}",
        }
        if self.shape is not None:
            env.update(self.shape.environment())
        env.update(self.env)
        return env

    def load_options(self) -> list[str]:
        """Locust's options for users, spawn rate and run time; a shape sets those itself."""
        if self.shape is not None:
            return []
        rate = self.spawn_rate if self.spawn_rate is not None else self.users
        return ["--users", str(self.users), "--spawn-rate", f"{rate:g}", "--run-time", f"{self.run_seconds}s"]
