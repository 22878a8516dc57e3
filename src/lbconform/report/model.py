"""What a run produced, as plain values: test results, measurements and the run's facts.

Everything the reports say comes from these dataclasses, and they come from pytest's
``user_properties`` (strings, so they survive pytest-xdist). The property keys a test carries
are defined here, next to the values they encode, so the plugin and the collector agree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Final

# The keys of what a suite test carries in ``user_properties`` (they survive pytest-xdist): the
# pytest plugin writes them, the report's collector reads them, both from here.
#: The test's one-line docstring; becomes its description in the report.
DESCRIPTION_PROPERTY: Final = "lbconform.description"
#: The features the test declares, comma-separated.
FEATURES_PROPERTY: Final = "lbconform.features"
#: NOT_SUPPORTED where the test was not run for want of a feature or a provider's capability.
RESULT_PROPERTY: Final = "lbconform.result"
#: A phase (setup, call, teardown) that broke on something other than an assertion: the cluster's
#: API, the network to it, the lab or the harness. Its value is the phase.
ERROR_PROPERTY: Final = "lbconform.error"
#: How a not-supported test's reason begins, wherever a person reads it.
NOT_SUPPORTED_TEXT: Final = "not supported"
#: One measurement, as ``Measurement.to_json()``; a test may carry any number of them.
MEASUREMENT_PROPERTY: Final = "lbconform.measurement"

PASSED, FAILED, SKIPPED, NOT_SUPPORTED = "passed", "failed", "skipped", "not-supported"
#: A test that broke on the cluster, the network to it, the lab or the harness, not on an
#: assertion about the LB: no verdict on the implementation either way.
ERROR: Final = "error"
#: Every outcome a TestResult can have, in the order reports list them.
OUTCOMES: Final = (PASSED, FAILED, ERROR, SKIPPED, NOT_SUPPORTED)

UNKNOWN: Final = "unknown"


@dataclass(frozen=True)
class Measurement:
    """A number with a unit that one test observed, beside what the provider declared for it.

    ``test`` is the observing test's name as the report lists it (``TestResult.name``);
    ``feature`` is the feature the number characterises.
    """

    name: str
    value: float
    unit: str
    test: str = ""
    feature: str | None = None
    declared: float | None = None

    @property
    def difference(self) -> float | None:
        """Measured minus declared; rounded to nanoseconds' worth so 4.2 - 4.0 reads 0.2."""
        if self.declared is None:
            return None
        return round(self.value - self.declared, 9)

    def to_json(self) -> str:
        """The ``MEASUREMENT_PROPERTY`` value: the test is implied by the item carrying it."""
        return json.dumps({"name": self.name, "value": self.value, "unit": self.unit,
                           "declared": self.declared, "feature": self.feature})

    @classmethod
    def from_json(cls, text: str, test: str) -> Measurement:
        """Parse a ``MEASUREMENT_PROPERTY`` value; a malformed one raises ValueError."""
        try:
            data = json.loads(text)
            value = float(data["value"])
            declared = None if data.get("declared") is None else float(data["declared"])
            name, unit = str(data["name"]), str(data["unit"])
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"malformed measurement {text!r}: {exc}") from None
        if not math.isfinite(value):
            raise ValueError(f"measurement {name!r} is not a finite number: {value}")
        feature = data.get("feature")
        return cls(name=name, value=value, unit=unit, test=test,
                   feature=None if feature is None else str(feature), declared=declared)


@dataclass(frozen=True)
class TestResult:
    """One suite test's result; ``outcome`` is one of OUTCOMES.

    ``name`` is the short, stable name reports list (see ``report_name``); ``message`` is one
    line saying why the test failed or was skipped, empty when it passed.
    """

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    name: str
    description: str
    features: tuple[str, ...]
    outcome: str
    duration: float
    message: str = ""


def report_name(nodeid: str) -> str:
    """A test's name in reports: its nodeid from the suites folder on, without ``.py``.

    ``suites/core/test_lifecycle.py::test_ingress[tcp]`` reads ``core/test_lifecycle::test_ingress[tcp]``:
    the module stays (function names repeat across modules), and the name does not depend on
    where the suites were installed or on pytest's rootdir.
    """
    path, sep, rest = nodeid.partition("::")
    parts = path.split("/")
    start = len(parts) - parts[::-1].index("suites") if "suites" in parts else len(parts) - 1
    module = "/".join(parts[start:]).removesuffix(".py")
    return f"{module}{sep}{rest}"



@dataclass(frozen=True)
class Implementation:
    """The load-balancer implementation a report certifies, and who answers for it."""

    organization: str
    project: str
    url: str
    version: str
    contact: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunInfo:
    """Facts about one run that are not test results: what was tested, where, with what.

    ``target`` is ``"lab"`` or ``"cluster"``; ``date`` is ISO-8601 in UTC (``utc_now()``);
    ``profiles`` are the profiles the run selected; ``declared`` the provider's declared
    parameters (a declaration file's over them), ``declared_sources`` where each came from (by the
    same names: ``{"from": "provider"}``, or ``"declaration"`` with the file's ``source`` link and
    any ``perPolicy`` values; see ``lbconform.declared_provider``), and ``timeouts`` the timeouts
    in effect, in seconds.
    """

    implementation: Implementation
    provider: str
    mode: str
    target: str
    kubernetes_version: str
    nodes: tuple[str, ...]
    date: str
    lbconform_version: str
    run_id: str
    profiles: tuple[str, ...]
    declared: dict[str, Any] = field(default_factory=dict)
    declared_sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeouts: dict[str, float] = field(default_factory=dict)

    @classmethod
    def unknown(cls, profiles: tuple[str, ...]) -> RunInfo:
        """What a run knows about itself when the target can no longer be asked."""
        return cls(implementation=Implementation(UNKNOWN, UNKNOWN, "", UNKNOWN), provider=UNKNOWN,
                   mode=UNKNOWN, target=UNKNOWN, kubernetes_version=UNKNOWN, nodes=(), date=utc_now(),
                   lbconform_version=lbconform_version(), run_id=UNKNOWN, profiles=profiles)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lbconform_version() -> str:
    try:
        return metadata.version("lbconform")
    except metadata.PackageNotFoundError:
        return UNKNOWN
