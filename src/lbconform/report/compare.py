"""The differences between a conformance report and the report its evidence makes, one line each.

Each line names the field as ``report verify`` prints every problem (``profiles[0].result``) and
says what the evidence gives instead; a profile's ``tests`` and ``features`` are compared by name,
so a test moved from one list to another is one line saying where the evidence puts it
(``profiles[0].tests.passed: the evidence says core/test_x::t failed``), and measurements are
matched one by one when some are missing or added.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from lbconform.report.schema import quote

#: The report's section that names its evidence: not itself made from the evidence.
SECTION: Final = "evidence"

_MISSING: Final = object()
#: What the evidence says of a test or feature in each of a profile's lists.
_SAYS: Final = {"passed": "passed", "failed": "failed", "errors": "broke (errors)", "skipped": "was skipped",
                "notSupported": "is not supported"}
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def differences(doc: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """Every way the report ``doc`` departs from the report its evidence makes (``expected``), one
    line each, naming the field: ``profiles[0].tests.passed: the evidence says t failed``."""
    out: list[str] = []
    keys = [*expected, *(k for k in doc if k not in expected and k != SECTION)]
    for key in keys:
        got, want = doc.get(key, _MISSING), expected.get(key, _MISSING)
        if key == "profiles" and isinstance(got, list) and isinstance(want, list):
            out += _profiles(got, want)
        elif key == "measurements" and isinstance(got, list) and isinstance(want, list):
            out += _measurements(got, want)
        else:
            out += _diff(str(key), got, want)
    return out


def _at(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if isinstance(key, str) and _NAME.fullmatch(key) else f"{path}[{key!r}]"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _diff(path: str, got: Any, want: Any) -> list[str]:
    if got is _MISSING:
        return [f"{path}: missing; the evidence gives {quote(want)}"]
    if want is _MISSING:
        return [f"{path}: not in the evidence ({quote(got)})"]
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for key in [*want, *(k for k in got if k not in want)]:
            out += _diff(_at(path, key), got.get(key, _MISSING), want.get(key, _MISSING))
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        pairs = enumerate(zip(got, want, strict=True))
        return [line for i, (g, w) in pairs for line in _diff(_at(path, i), g, w)]
    return [] if _same(got, want) else [f"{path}: {quote(got)} but the evidence gives {quote(want)}"]


def _profiles(got: list[Any], want: list[Any]) -> list[str]:
    names = [p.get("name") if isinstance(p, dict) else None for p in got]
    wanted = {p["name"]: p for p in want}
    out = []
    if names != list(wanted):
        out.append(f"profiles: the report has {quote(names)} but the evidence gives {quote(list(wanted))}")
    for i, profile in enumerate(got):
        expected = wanted.get(names[i])
        if not isinstance(profile, dict) or expected is None:
            continue
        for key in [*expected, *(k for k in profile if k not in expected)]:
            path = f"profiles[{i}].{key}"
            mine, theirs = profile.get(key, _MISSING), expected.get(key, _MISSING)
            if key in ("tests", "features") and isinstance(mine, dict) and isinstance(theirs, dict):
                out += _lists(path, mine, theirs)
            else:
                out += _diff(path, mine, theirs)
    return out


def _lists(path: str, got: Mapping[str, Any], want: Mapping[str, list[str]]) -> list[str]:
    """A profile's ``tests`` or ``features``: where the report lists a name, against the evidence."""
    where = {name: key for key, names in want.items() for name in names}
    listed = {name for names in got.values() if isinstance(names, list)
              for name in names if isinstance(name, str)}
    out = []
    for key, names in got.items():
        if not isinstance(names, list):
            out += _diff(_at(path, key), names, want.get(key, _MISSING))
            continue
        for name in names:
            if not isinstance(name, str) or where.get(name) == key:
                continue
            if name in where:
                says = _SAYS.get(where[name], where[name])
                out.append(f"{_at(path, key)}: the evidence says {name} {says}")
            else:
                out.append(f"{_at(path, key)}: {name} is not in the evidence")
    for name, key in where.items():
        if name not in listed:
            out.append(f"{_at(path, key)}: {name} is missing; the evidence says it "
                       f"{_SAYS.get(key, key)}")
    return out


def _measurements(got: list[Any], want: list[Any]) -> list[str]:
    if len(got) == len(want):
        return _diff("measurements", got, want)
    unmatched = list(want)
    out = []
    for i, m in enumerate(got):
        match = next((j for j, w in enumerate(unmatched) if not _diff("", m, w)), None)
        if match is None:
            out.append(f"measurements[{i}]: not in the evidence ({_measured(m)})")
        else:
            unmatched.pop(match)
    return out + [f"measurements: {_measured(w)} is missing; the evidence has it" for w in unmatched]


def _measured(m: Any) -> str:
    if isinstance(m, dict):
        return f"{m.get('name')!r} of test {m.get('test')!r}"
    return quote(m)
