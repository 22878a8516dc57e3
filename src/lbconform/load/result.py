"""What a Locust run counted: requests, failures by kind, rate, duration and phases.

Totals come from Locust's ``--json-file`` output (one entry per request name and type; it
holds no failure texts). Failures by kind come from the failure texts, which the
locustfiles start with the kind (``"reset: ..."``, see ``locustfiles/lbconform_locust.py``):
first from the file the master writes when it quits (complete), else from Locust's
``_failures.csv`` (rewritten once a second, so it can miss the last second). The kinds are
the request loop's (``lbconform.traffic.requests``) plus ``other`` for a text that names
none, so a rollout measured either way reads the same. Locust's own failure total stays
the reference: what the texts do not account for is counted as ``other``.
"""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbconform.errors import LoadError
from lbconform.traffic.requests import CLOSED, REFUSED, RESET, TIMEOUT, WRONG

log = logging.getLogger(__name__)

OTHER = "other"
#: Every kind a failure can have, in report order.
KINDS = (RESET, REFUSED, TIMEOUT, CLOSED, WRONG, OTHER)

__all__ = ["KINDS", "OTHER", "FailureCount", "LoadResult", "Phase", "kind_of_error", "read_phases",
           "read_result"]


@dataclass(frozen=True)
class Phase:
    """A phase of the load shape, and the wall-clock time (Unix seconds) the shape entered it."""

    name: str
    at: float


@dataclass(frozen=True)
class FailureCount:
    """One distinct failure as Locust grouped it."""

    kind: str
    method: str
    name: str
    error: str
    occurrences: int


@dataclass(frozen=True)
class LoadResult:
    requests: int
    failures: int
    #: Every kind of ``KINDS``, zeros included.
    failures_by_kind: Mapping[str, int]
    requests_per_second: float
    #: Seconds from the start of the stats to the last request.
    duration: float
    started_at: float
    ended_at: float
    phases: tuple[Phase, ...] = ()
    errors: tuple[FailureCount, ...] = ()
    #: Exceptions the users raised (a locustfile bug, not a failed request), with counts.
    exceptions: tuple[str, ...] = ()
    workdir: Path | None = field(default=None, compare=False)

    @property
    def resets(self) -> int:
        return self.failures_by_kind[RESET]

    @property
    def refused(self) -> int:
        return self.failures_by_kind[REFUSED]

    @property
    def timeouts(self) -> int:
        return self.failures_by_kind[TIMEOUT]

    @property
    def closed(self) -> int:
        return self.failures_by_kind[CLOSED]

    @property
    def http_errors(self) -> int:
        """Wrong answers: an HTTP error status or an empty body."""
        return self.failures_by_kind[WRONG]

    @property
    def other(self) -> int:
        return self.failures_by_kind[OTHER]

    def phase_at(self, when: float) -> str | None:
        """The phase a wall-clock time falls in (None before the first)."""
        current = None
        for phase in self.phases:
            if phase.at <= when:
                current = phase.name
        return current


def kind_of_error(text: str) -> str:
    """The kind a failure text starts with; ``other`` when it starts with none.

    Locust may wrap the text (``CatchResponseError('reset: ...')`` when a string was given);
    the first quote-stripped word inside is then read.
    """
    head = text.split(":", 1)[0]
    head = head.split("(", 1)[-1].strip("'\" ")
    return head if head in KINDS else OTHER


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadError(f"cannot read Locust's output {path}: {exc}") from None


def _failure_rows(prefix: Path) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Failures and exceptions: from the master's own file if it wrote one, else Locust's CSVs."""
    own = prefix.with_name(prefix.name + "-failures.json")
    if own.is_file():
        data = _json(own)
        return list(data["failures"]), [f"{e['count']}x {e['msg']}" for e in data["exceptions"]]
    failures_csv = prefix.with_name(prefix.name + "_failures.csv")
    if not failures_csv.is_file():
        return None
    with failures_csv.open(newline="") as f:
        rows = [{"method": r["Method"], "name": r["Name"], "error": r["Error"],
                 "occurrences": int(r["Occurrences"])} for r in csv.DictReader(f)]
    exceptions: list[str] = []
    exceptions_csv = prefix.with_name(prefix.name + "_exceptions.csv")
    if exceptions_csv.is_file():
        with exceptions_csv.open(newline="") as f:
            exceptions = [f"{r['Count']}x {r['Message']}" for r in csv.DictReader(f)]
    return rows, exceptions


def read_phases(path: Path) -> tuple[Phase, ...]:
    """The phases a load shape wrote to its ``LBCONFORM_PHASES_FILE`` (JSON lines), in order."""
    if not path.is_file():
        return ()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return tuple(Phase(str(d["phase"]), float(d["at"])) for d in lines)


def read_result(prefix: Path, phases_file: Path | None = None) -> LoadResult:
    """The result of a run whose ``--json-file`` and ``--csv`` were both ``prefix``.

    Locust appends ``.json`` to the JSON file's name.
    """
    entries = _json(prefix.with_name(prefix.name + ".json"))
    if not isinstance(entries, list):
        raise LoadError(f"{prefix}.json: expected Locust's list of stats entries")
    requests = sum(int(e["num_requests"]) for e in entries)
    failures = sum(int(e["num_failures"]) for e in entries)
    starts = [float(e["start_time"]) for e in entries if e.get("start_time")]
    ends = [float(e["last_request_timestamp"]) for e in entries if e.get("last_request_timestamp")]
    started = min(starts) if starts else 0.0
    ended = max(ends) if ends else started
    duration = max(ended - started, 0.0)

    by_kind: Counter[str] = Counter({k: 0 for k in KINDS})
    errors: list[FailureCount] = []
    exceptions: list[str] = []
    rows = _failure_rows(prefix)
    if rows is not None:
        failure_rows, exceptions = rows
        for r in failure_rows:
            kind = kind_of_error(str(r["error"]))
            by_kind[kind] += int(r["occurrences"])
            errors.append(FailureCount(kind, str(r["method"]), str(r["name"]), str(r["error"]),
                                       int(r["occurrences"])))
    counted = sum(by_kind.values())
    if counted != failures:
        log.warning("Locust counted %d failures, its failure texts %d: the difference is counted as %s",
                    failures, counted, OTHER)
        by_kind[OTHER] = max(by_kind[OTHER] + failures - counted, 0)
    return LoadResult(
        requests=requests, failures=failures, failures_by_kind=dict(by_kind),
        requests_per_second=requests / duration if duration > 0 else 0.0, duration=duration,
        started_at=started, ended_at=ended, phases=read_phases(phases_file) if phases_file else (),
        errors=tuple(sorted(errors, key=lambda e: -e.occurrences)), exceptions=tuple(exceptions),
        workdir=prefix.parent,
    )
