"""The conformance report: the versioned YAML document a vendor submits for a run.

Its format is ``reports/schema/conformance-report.v1alpha1.json``; keys are camelCase except
inside ``declared``, which holds the provider's parameters under the provider's own names, and
``declaredSources``, which says by the same names where each came from: the provider, or a
declaration file (``--declaration``) with the link to the documentation that states it.

How results are aggregated:

- Tests are listed by their report name (``model.report_name``: the nodeid from the suites
  folder on, without ``.py``, e.g. ``core/test_lifecycle::test_ingress``), sorted.
- A test belongs to one profile, the last of its features' (``features.test_profile``); only the
  profiles the run selected appear, in the order of ``features.PROFILES``. A test of no
  selected profile appears in no profile.
- A profile's result is ``interrupted`` when the run was (Ctrl-C, SIGTERM): what ran is listed,
  but it is no conformance claim either way; else ``failure`` if any of its tests failed;
  ``error`` if none failed but some broke on the cluster, the lab or the harness (no claim
  either way); ``partial`` if any was skipped or not supported, or if none ran at all; ``success`` otherwise.
- Within a profile, a feature is listed when at least one of the profile's tests declares it,
  and only the profile's own features are listed. It is ``failed`` if any of its tests
  failed, in ``errors`` if none failed but one broke, ``passed`` if all passed,
  ``notSupported`` if all were not supported, and ``skipped`` otherwise (some skipped, or a
  mix of passed and not run).
- ``statistics`` counts the tests in each list of ``tests``.
- ``reasons`` gives, for each of the profile's tests that did not pass, the one line that says
  why (the failure, or the reason it was skipped or not supported), so that a reader of the
  submitted report alone knows what an implementation does not claim and on what grounds.

``build`` is the one place these rules live: the collector builds the report with it, and
``report verify`` builds it again from the run's evidence (``lbconform.report.evidence``), whose
section (``evidence``) the collector adds last.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import yaml

from lbconform.features import PROFILES, Feature, test_profile
from lbconform.report.model import (
    ERROR,
    FAILED,
    NOT_SUPPORTED,
    PASSED,
    SKIPPED,
    Measurement,
    RunInfo,
    TestResult,
)

API_VERSION: Final = "lbconform.io/v1alpha1"
KIND: Final = "ConformanceReport"

SUCCESS, PARTIAL, FAILURE, INTERRUPTED = "success", "partial", "failure", "interrupted"
#: Some tests broke on the cluster, the lab or the harness and none failed: no claim either way.
ERRORED: Final = "error"

#: Outcome -> the key of its list in ``tests``, ``features`` and ``statistics``.
_KEYS: Final = {PASSED: "passed", FAILED: "failed", ERROR: "errors", SKIPPED: "skipped",
                NOT_SUPPORTED: "notSupported"}


def build(results: Iterable[TestResult], measurements: Iterable[Measurement], run: RunInfo,
          interrupted: bool = False) -> dict[str, Any]:
    """The report as a plain dict, keys in the order the YAML shows them."""
    results = list(results)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"date": run.date, "runId": run.run_id, "lbconformVersion": run.lbconform_version},
        "implementation": {
            "organization": run.implementation.organization,
            "project": run.implementation.project,
            "url": run.implementation.url,
            "version": run.implementation.version,
            "contact": list(run.implementation.contact),
        },
        "target": {
            "kind": run.target,
            "kubernetesVersion": run.kubernetes_version,
            "nodes": list(run.nodes),
            "provider": run.provider,
            "mode": run.mode,
        },
        "declared": dict(run.declared),
        **({"declaredSources": dict(run.declared_sources)} if run.declared_sources else {}),
        "timeouts": {name: float(seconds) for name, seconds in run.timeouts.items()},
        "profiles": [_profile(name, results, interrupted) for name in PROFILES if name in run.profiles],
        "measurements": [_measurement(m) for m in sorted(
            measurements, key=lambda m: (m.feature is None, m.feature or "", m.name, m.test))],
    }


def profile_result(outcomes: Iterable[str]) -> str:
    outcomes = list(outcomes)
    if FAILED in outcomes:
        return FAILURE
    if ERROR in outcomes:
        return ERRORED
    if not outcomes or SKIPPED in outcomes or NOT_SUPPORTED in outcomes:
        return PARTIAL
    return SUCCESS


def feature_outcome(outcomes: Iterable[str]) -> str:
    """The outcome of a feature from the outcomes of its tests (at least one)."""
    outcomes = set(outcomes)
    if FAILED in outcomes:
        return FAILED
    if ERROR in outcomes:
        return ERROR
    if outcomes == {PASSED}:
        return PASSED
    if outcomes == {NOT_SUPPORTED}:
        return NOT_SUPPORTED
    return SKIPPED


def _profile(name: str, results: list[TestResult], interrupted: bool) -> dict[str, Any]:
    own = {f.value for f in PROFILES[name]}
    members = [r for r in results if name in profiles_of(r.features)]
    tests: dict[str, list[str]] = {key: [] for key in _KEYS.values()}
    for r in members:
        tests[_KEYS[r.outcome]].append(r.name)
    per_feature: dict[str, list[str]] = {}
    for r in members:
        for f in r.features:
            if f in own:
                per_feature.setdefault(f, []).append(r.outcome)
    features: dict[str, list[str]] = {key: [] for key in _KEYS.values()}
    for f, outcomes in per_feature.items():
        features[_KEYS[feature_outcome(outcomes)]].append(f)
    return {
        "name": name,
        "result": INTERRUPTED if interrupted else profile_result(r.outcome for r in members),
        "statistics": {key: len(names) for key, names in tests.items()},
        "tests": {key: sorted(names) for key, names in tests.items()},
        "reasons": {r.name: r.message for r in sorted(members, key=lambda r: r.name)
                    if r.outcome != PASSED and r.message},
        "features": {key: sorted(names) for key, names in features.items()},
    }


def profiles_of(features: Iterable[str]) -> set[str]:
    """The profile of a test with these feature names (a set of one, or empty when none is a Feature)."""
    known = [Feature(f) for f in features if f in {k.value for k in Feature}]
    return {test_profile(known)} if known else set()


def _measurement(m: Measurement) -> dict[str, Any]:
    return {"name": m.name, "value": m.value, "unit": m.unit, "test": m.test, "feature": m.feature,
            "declared": m.declared, "difference": m.difference}


def dump(doc: dict[str, Any]) -> str:
    """The report's YAML, keys in the order of ``doc``."""
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(doc), encoding="utf-8")
