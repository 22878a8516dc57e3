"""The declaration file: what an implementation claims, as data (``lbconform run --declaration FILE``).

This module owns the file's format: reading one and checking it before anything is made (each
mistake is one line naming the file and the field, ``my-lb.yaml: declared.idleTimeout: ...``),
and writing any provider's declaration in it (``lbconform declaration show``), so that a vendor
with no Python starts from a real one. The format is ``apiVersion: lbconform.io/v1alpha1``,
``kind: Declaration``; its schema is ``reports/schema/declaration.v1alpha1.json``. How a
declaration overrides a provider, and where each value came from, is
``lbconform.declared_provider``'s.

Keys are camelCase, as in Kubernetes objects: ``declared`` holds ``providers.base.Declared``
field by field (``healthCheckInterval`` is ``health_check_interval``), each a plain value or
``{value: V, source: LINK}``; ``timeouts`` keep the names of ``config.Timeouts`` (``lb_create``),
as ``--timeout`` does. Times are numbers of seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_type_hints

import yaml

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.interface import Interface, Problem
from lbconform.interface import parse as parse_interface
from lbconform.providers.base import (
    ENTRY_EVERY_NODE,
    ENTRY_ONE_NODE,
    IP_MODE_PROXY,
    IP_MODE_VIP,
    Declared,
)
from lbconform.resources import data_dir

if TYPE_CHECKING:
    from lbconform.providers.base import Provider

API_VERSION: Final = "lbconform.io/v1alpha1"
KIND: Final = "Declaration"
SCHEMA_FILE: Final = "declaration.v1alpha1.json"
#: The longest time a declaration may state: a day. Nothing an LB promises takes longer, so a
#: larger number is a unit mistake (milliseconds written as seconds).
MAX_SECONDS: Final = 86400.0
#: The largest health-check threshold a declaration may state.
MAX_COUNT: Final = 100
#: The externalTrafficPolicy values ``perPolicy`` takes.
POLICIES: Final = ("Cluster", "Local")
IMPLEMENTATION_FIELDS: Final = ("organization", "project", "url", "version")
TOP_FIELDS: Final = ("apiVersion", "kind", "implementation", "features", "declared", "perPolicy",
                     "perMode", "timeouts", "interface")
#: The values a string field of ``Declared`` takes, where it is a choice.
CHOICES: Final = {"entry": (ENTRY_EVERY_NODE, ENTRY_ONE_NODE), "ip_mode": (IP_MODE_VIP, IP_MODE_PROXY)}
#: The values health checks have; without health checks each is 0.
HEALTH_CHECK_VALUES: Final = ("health_check_interval", "healthy_threshold", "unhealthy_threshold")
VALUE, SOURCE = "value", "source"


def camel(name: str) -> str:
    """A ``Declared`` field's key in the file: ``health_check_interval`` -> ``healthCheckInterval``."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


#: ``Declared``'s fields in the order a declaration lists them (healthChecks first, notes last),
#: each with its key in the file.
FIELDS: Final = {f.name: camel(f.name) for f in sorted(
    fields(Declared), key=lambda f: (f.name != "health_checks", f.name == "notes"))}
BY_KEY: Final = {key: name for name, key in FIELDS.items()}


class _Problem(Exception):
    """One mistake in a declaration: where (``declared.idleTimeout``) and what."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path, self.message = path, message


def _quote(value: Any) -> str:
    """A value as the file holds it, cut to 80 characters: a message never echoes a whole file."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


# --- one value of ``declared``: checked and normalised by what its field holds ----------------------
Check = Callable[[Any, str], Any]


def _seconds(optional: bool) -> Check:
    what = "a number of seconds >= 0" + (", or null for none" if optional else "")

    def check(value: Any, path: str) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or value < 0:
            raise _Problem(path, f"must be {what}, got {_quote(value)}")
        if value > MAX_SECONDS:
            raise _Problem(path, f"must be at most {MAX_SECONDS:g} s (a day), got {value:g}")
        return float(value)
    return check


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise _Problem(path, f"must be a whole number from 0 to {MAX_COUNT}, got {_quote(value)}")
    return value


def _flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _Problem(path, f"must be true or false, got {_quote(value)}")
    return value


def _choice(choices: tuple[str, ...]) -> Check:
    def check(value: Any, path: str) -> str:
        if value not in choices:
            raise _Problem(path, f"must be one of {', '.join(choices)}, got {_quote(value)}")
        return str(value)
    return check


def _text(optional: bool) -> Check:
    def check(value: Any, path: str) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise _Problem(path, f"must be a non-empty string{', or null for none' if optional else ''}, "
                                 f"got {_quote(value)}")
        return value
    return check


def _notes(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Problem(path, f"must be a mapping of names to text, got {_quote(value)}")
    out = {}
    for key, text in value.items():
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            raise _Problem(f"{path}.{key}", f"must be text, got {_quote(text)}")
        out[str(key)] = str(text)
    return out


def _check_for(name: str, hint: Any) -> Check:
    """How a value of the ``Declared`` field ``name`` (of type ``hint``) is checked."""
    by_type: dict[Any, Check] = {float: _seconds(False), float | None: _seconds(True), int: _count,
                                 bool: _flag, str | None: _text(True), dict[str, str]: _notes}
    if hint is str:
        return _choice(CHOICES[name]) if name in CHOICES else _text(False)
    if hint not in by_type:
        raise TypeError(f"Declared.{name} is a {hint}, which a declaration file cannot carry")
    return by_type[hint]


CHECKS: Final = {name: _check_for(name, hint) for name, hint in get_type_hints(Declared).items()}


@dataclass(frozen=True)
class Given:
    """A value the file gives, where in the file (``declared.idleTimeout``), and the link to the
    implementation's documentation that states it, where the file gives one."""

    value: Any
    path: str
    source: str | None = None


@dataclass(frozen=True)
class Declaration:
    """A declaration file's content, checked: ``declared`` by ``Declared`` field name, the
    ``perPolicy`` and ``perMode`` overrides likewise; ``features`` None where the file gives none
    (the provider's then stand); ``timeouts`` in seconds by ``Timeouts`` name; ``interface`` how the
    harness asks the implementation for things and reads its pool (``lbconform.interface``)."""

    file: str
    implementation: Mapping[str, str] = field(default_factory=dict)
    features: frozenset[Feature] | None = None
    declared: Mapping[str, Given] = field(default_factory=dict)
    per_policy: Mapping[str, Mapping[str, Given]] = field(default_factory=dict)
    per_mode: Mapping[str, Mapping[str, Given]] = field(default_factory=dict)
    timeouts: Mapping[str, float] = field(default_factory=dict)
    interface: Interface = field(default_factory=Interface)

    def given(self, mode: str | None, policy: str | None) -> dict[str, Given]:
        """The values the file gives for a Service of ``policy`` (None: any) in ``mode``: the top
        level's, then the mode's, then the policy's, the later winning. Without health checks
        their interval and thresholds are 0: the file's ``healthChecks: false`` gives those too."""
        values = dict(self.declared)
        values.update(self.per_mode.get(mode, {}) if mode else {})
        values.update(self.per_policy.get(policy, {}) if policy else {})
        checks = values.get("health_checks")
        if checks is not None and checks.value is False:
            for name in HEALTH_CHECK_VALUES:
                zero = CHECKS[name](0, "")
                values.setdefault(name, Given(zero, checks.path, checks.source))
        return values


# --- contradictions among values: in the file alone, and with the provider's ----------------------
def contradiction(values: Mapping[str, Any], paths: Mapping[str, str],
                  provider: str | None) -> tuple[str, str] | None:
    """The first contradiction among ``values`` (by field name) as (the file's path to blame, what
    is wrong), or None. ``paths`` are the values the file gives; the others are ``provider``'s,
    and a contradiction among the provider's values alone is not the file's to answer for."""

    def theirs(name: str) -> str:
        return "" if name in paths else f" (the {provider} provider's)"

    def blame(value: str, rule: str, wrong: str, fix: str) -> tuple[str, str] | None:
        """``value`` breaks the ``rule`` that field ``rule`` sets: the file's ``value`` is to blame
        where it gives it (``wrong`` says how), else the file's ``rule`` (``fix`` says what to do)."""
        if value in paths:
            return paths[value], f"{wrong}{theirs(rule)}, got {_quote(values[value])}"
        if rule in paths:
            return paths[rule], f"{_quote(values[rule])}, but {FIELDS[value]} is {_quote(values[value])}" \
                                f"{theirs(value)}: {fix}"
        return None

    found: list[tuple[str, str] | None] = []
    checks = values.get("health_checks")
    for name in (n for n in HEALTH_CHECK_VALUES if n in values):
        key, least = FIELDS[name], "> 0" if name == "health_check_interval" else ">= 1"
        if checks is False and values[name] != 0:
            found.append(blame(name, "health_checks", "must be 0 when healthChecks is false",
                               f"give {key}: 0 too"))
        if checks is True and values[name] <= 0:
            found.append(blame(name, "health_checks", f"must be {least} when healthChecks is true",
                               f"give {key} {least} too"))
    if values.get("idle_reset") is True and "idle_timeout" in values and values["idle_timeout"] is None:
        found.append(blame("idle_timeout", "idle_reset", "must be a number of seconds when idleReset is true",
                           "give an idleTimeout, or idleReset: false"))
    entry = values.get("entry")
    if values.get("local_move_gap") and entry is not None and entry != ENTRY_ONE_NODE:
        found.append(blame("local_move_gap", "entry", f"must be 0 unless entry is {ENTRY_ONE_NODE}",
                           "give localMoveGap: 0 too"))
    return next((f for f in found if f is not None), None)


# --- reading a file ----------------------------------------------------------------------------------
def load(path: str | Path) -> Declaration:
    """The declaration in the file ``path``, checked; a UsageError of one line otherwise."""
    name = str(path)
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--declaration {name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--declaration {name}: cannot read it ({why})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{name}: not YAML or JSON ({what}{where})") from None
    return parse(doc, name)


def parse(doc: Any, name: str) -> Declaration:
    """The declaration ``doc`` (as YAML loads it) of the file ``name``, checked."""
    try:
        declaration = _parse(doc, name)
        for mode in (None, *declaration.per_mode):
            for policy in (None, *POLICIES):
                given = declaration.given(mode, policy)
                found = contradiction({n: g.value for n, g in given.items()},
                                      {n: g.path for n, g in given.items()}, None)
                if found is not None:
                    raise _Problem(*found)
    except _Problem as problem:
        raise UsageError(f"{name}: {problem}") from None
    # What is checked above is what the schema says; the schema stays the format's final word.
    problems = schema_problems(doc)
    if problems:
        raise UsageError(f"{name}: {problems[0]}")
    return declaration


def _mapping(raw: Any, path: str, what: str) -> dict[Any, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        kind = "a list" if isinstance(raw, list) else _quote(raw)
        raise _Problem(path, f"{what}, got {kind}")
    return raw


def _known(mapping: Mapping[Any, Any], known: tuple[str, ...], path: str) -> None:
    unknown = [k for k in mapping if k not in known]
    if unknown:
        raise _Problem(f"{path}.{unknown[0]}" if path else str(unknown[0]),
                       f"unknown field: the fields are {', '.join(known)}")


def _parse(doc: Any, name: str) -> Declaration:
    if not isinstance(doc, dict):
        what = "nothing" if doc is None else "a list" if isinstance(doc, list) else _quote(doc)
        raise _Problem("", f"a Declaration is a mapping (apiVersion, kind, declared, ...), got {what}")
    for key, want in (("apiVersion", API_VERSION), ("kind", KIND)):
        if key not in doc:
            raise _Problem(key, f"missing: give {key}: {want}")
        if doc[key] != want:
            raise _Problem(key, f"must be {want}, got {_quote(doc[key])}")
    _known(doc, TOP_FIELDS, "")
    implementation = _mapping(doc.get("implementation"), "implementation", "must be a mapping")
    _known(implementation, IMPLEMENTATION_FIELDS, "implementation")
    for key, value in implementation.items():
        if not isinstance(value, str):
            raise _Problem(f"implementation.{key}", f"must be a string, got {_quote(value)}")
    per_policy = _mapping(doc.get("perPolicy"), "perPolicy", "must be a mapping of Cluster and Local")
    _known(per_policy, POLICIES, "perPolicy")
    per_mode = _mapping(doc.get("perMode"), "perMode", "must be a mapping of the provider's modes")
    return Declaration(
        file=name, implementation=implementation, features=_features(doc),
        declared=_values(doc.get("declared"), "declared"),
        per_policy={p: _values(per_policy[p], f"perPolicy.{p}") for p in POLICIES if p in per_policy},
        per_mode={str(m): _values(v, f"perMode.{m}") for m, v in per_mode.items()},
        timeouts=_timeouts(doc.get("timeouts")), interface=_interface(doc.get("interface")))


def _interface(raw: Any) -> Interface:
    if raw is None:
        return Interface()
    try:
        return parse_interface(raw)
    except Problem as problem:
        raise _Problem(problem.path, problem.message) from None


def _features(doc: Mapping[str, Any]) -> frozenset[Feature] | None:
    if "features" not in doc:
        return None
    names = doc["features"]
    if not isinstance(names, list):
        raise _Problem("features", f"must be a list of feature names, got {_quote(names)}")
    known = {f.value for f in Feature}
    for i, feature in enumerate(names):
        if feature not in known:
            raise _Problem(f"features[{i}]", f"unknown feature {_quote(feature)}: known features are "
                                              f"{', '.join(f.value for f in Feature)}")
    return frozenset(Feature(f) for f in names)


def _values(raw: Any, path: str) -> dict[str, Given]:
    """The ``Declared`` values of one mapping of the file, by field name."""
    out = {}
    for key, raw_value in _mapping(raw, path, "must be a mapping of declared values").items():
        here = f"{path}.{key}"
        if key not in BY_KEY:
            raise _Problem(here, f"unknown field: the fields are {', '.join(FIELDS.values())}")
        name = BY_KEY[key]
        value, source = raw_value, None
        # A value with its source; notes are a mapping themselves, of text rather than mappings.
        if isinstance(raw_value, dict) and VALUE in raw_value and (
                name != "notes" or isinstance(raw_value[VALUE], dict)):
            _known(raw_value, (VALUE, SOURCE), here)
            value, source = raw_value[VALUE], raw_value.get(SOURCE)
            if source is not None and (not isinstance(source, str) or not source.strip()
                                       or "\n" in source):
                raise _Problem(f"{here}.source", "must be a link to the implementation's documentation "
                                                 f"(one line), got {_quote(source)}")
        out[name] = Given(CHECKS[name](value, here), here, source)
    return out


def _timeouts(raw: Any) -> dict[str, float]:
    out = {}
    limits = {name: maximum for name, _, maximum, _ in Timeouts().describe()}
    for key, value in _mapping(raw, "timeouts", "must be a mapping of timeouts").items():
        if key not in limits:
            raise _Problem(f"timeouts.{key}", f"unknown timeout: the timeouts are {', '.join(limits)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= limits[key]:
            raise _Problem(f"timeouts.{key}", f"must be a number of seconds > 0 and at most "
                                              f"{limits[key]:g} (the conformance limit), got {_quote(value)}")
        out[str(key)] = float(value)
    return out


@cache
def schema() -> dict[str, Any]:
    """The format's JSON schema (``reports/schema/declaration.v1alpha1.json``)."""
    doc: dict[str, Any] = json.loads((data_dir("reports") / "schema" / SCHEMA_FILE).read_text("utf-8"))
    return doc


def schema_problems(doc: Any) -> list[str]:
    """Every way ``doc`` departs from the schema, as ``field: problem``."""
    from jsonschema import Draft202012Validator

    from lbconform.report.schema import field_path, quote

    errors = sorted(Draft202012Validator(schema()).iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{field_path(e.absolute_path)}: {e.message.replace(repr(e.instance), quote(e.instance))}"
            for e in errors]


# --- writing one: any provider's declaration, in the file's format ------------------------------------
def from_provider(provider: Provider, other_modes: Mapping[str, Provider] | None = None) -> Declaration:
    """Everything ``provider`` claims as a declaration: every value, its features and timeouts, the
    values that differ for a policy (``declared_for``) and, from ``other_modes`` (the same provider
    set to each other mode), those that differ in a mode."""
    top = provider.declared()

    def values(declared: Declared, path: str, only_different: bool) -> dict[str, Given]:
        return {name: Given(CHECKS[name](getattr(declared, name), f"{path}.{key}"), f"{path}.{key}")
                for name, key in FIELDS.items()
                if not only_different or getattr(declared, name) != getattr(top, name)}

    per_policy = {p: values(provider.declared_for(p), f"perPolicy.{p}", True) for p in POLICIES}
    per_mode = {m: values(p.declared(), f"perMode.{m}", True) for m, p in (other_modes or {}).items()}
    return Declaration(
        file=f"the {provider.name} provider", features=frozenset(provider.features()),
        declared=values(top, "declared", False), per_policy={p: v for p, v in per_policy.items() if v},
        per_mode={m: v for m, v in per_mode.items() if v},
        timeouts={k: float(v) for k, v in dataclasses.asdict(provider.timeouts()).items()})


def to_document(declaration: Declaration) -> dict[str, Any]:
    """The declaration as the file holds it, keys in the order the file lists them."""

    def values(given: Mapping[str, Given]) -> dict[str, Any]:
        return {key: given[name].value if given[name].source is None
                else {VALUE: given[name].value, SOURCE: given[name].source}
                for name, key in FIELDS.items() if name in given}

    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    if declaration.implementation:
        doc["implementation"] = dict(declaration.implementation)
    if declaration.features is not None:
        doc["features"] = [f.value for f in Feature if f in declaration.features]
    doc["declared"] = values(declaration.declared)
    if declaration.per_policy:
        doc["perPolicy"] = {p: values(declaration.per_policy[p])
                            for p in POLICIES if p in declaration.per_policy}
    if declaration.per_mode:
        doc["perMode"] = {m: values(v) for m, v in declaration.per_mode.items()}
    if declaration.timeouts:
        doc["timeouts"] = dict(declaration.timeouts)
    if declaration.interface.raw:
        doc["interface"] = dict(declaration.interface.raw)
    return doc


def render(declaration: Declaration, comment: str = "") -> str:
    """The declaration as YAML, after ``comment`` (each of its lines a YAML comment)."""
    head = "".join(f"# {line}".rstrip() + "\n" for line in comment.splitlines())
    return head + yaml.safe_dump(to_document(declaration), sort_keys=False, allow_unicode=True, width=100)


def show(name: str, mode: str | None = None) -> str:
    """The installed provider ``name``'s declaration (in ``mode``, else its default) as a file."""
    from lbconform import providers

    provider = providers.load(name)
    if mode is not None:
        provider.set_mode(mode)
    others = {}
    for other in provider.modes:
        if other != provider.mode:
            others[other] = providers.load(name)
            others[other].set_mode(other)
    in_mode = f" in mode {provider.mode}" if provider.mode and len(provider.modes) > 1 else ""
    comment = (f"What the {name} provider declares{in_mode}, as a declaration file\n"
               f"(lbconform declaration show --provider {name}). Keep what your implementation's\n"
               "documentation states, change the rest and give each value you change its source\n"
               "({value: V, source: LINK}); add implementation: (organization, project, url, version).\n"
               "Then: lbconform run --declaration FILE. The format: docs/writing-a-declaration.md")
    return render(from_provider(provider, others), comment)
