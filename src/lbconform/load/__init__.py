"""Locust runs, local and distributed, and what they counted.

Locust sustains traffic while chaos kills nodes and rolls deployments; this package runs it
and reads its statistics. Locust always runs as its own process (gevent's patching must
never enter pytest), started and ended by pid. The users, the load shape and the failure
kinds are in the top-level ``locustfiles/`` folder; a worker pod for distributed runs is
``manifests/locust-worker.yaml``.

    result = run_load(LoadSpec("http_keepalive", "http://198.18.0.1", users=20, run_seconds=60),
                      netns="lab-internet")
    result.resets, result.failures_by_kind, result.requests_per_second
"""

from __future__ import annotations

from lbconform.load.locustfiles import (
    HTTP_KEEPALIVE,
    HTTP_NEW_CONNECTION,
    SHAPES,
    TCP_LONG_LIVED,
    locustfile,
    locustfiles_dir,
)
from lbconform.load.process import LocustProcess, locust_command
from lbconform.load.result import (
    KINDS,
    OTHER,
    FailureCount,
    LoadResult,
    Phase,
    kind_of_error,
    read_phases,
    read_result,
)
from lbconform.load.run import START_STOP_SLACK_SECONDS, LoadRun, run_load, start_load
from lbconform.load.spec import ChaosShape, Distributed, LoadSpec

__all__ = [
    "HTTP_KEEPALIVE",
    "HTTP_NEW_CONNECTION",
    "KINDS",
    "OTHER",
    "SHAPES",
    "START_STOP_SLACK_SECONDS",
    "TCP_LONG_LIVED",
    "ChaosShape",
    "Distributed",
    "FailureCount",
    "LoadResult",
    "LoadRun",
    "LoadSpec",
    "LocustProcess",
    "Phase",
    "kind_of_error",
    "locust_command",
    "locustfile",
    "locustfiles_dir",
    "read_phases",
    "read_result",
    "run_load",
    "start_load",
]
