"""Checks of a conformance report: its shape against the JSON schema, and its arithmetic; and
reading one from any file a user names.

The checks return readable messages that name the field (``profiles[0].result: ...``) and never
raise on a bad document, so ``report verify`` can print every problem at once; ``load_report``
answers a file that holds no document with one line. The schema is
``reports/schema/conformance-report.v1alpha1.json``, the versioned format itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from lbconform.resources import data_dir

SCHEMA_FILE = "conformance-report.v1alpha1.json"
_LISTS = ("passed", "failed", "errors", "skipped", "notSupported")


def schema_path() -> Path:
    return data_dir("reports") / "schema" / SCHEMA_FILE


@cache
def schema() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(schema_path().read_text(encoding="utf-8"))
    return doc


def field_path(parts: Iterable[str | int]) -> str:
    """``["profiles", 0, "result"]`` -> ``profiles[0].result``; the document itself is ``(report)``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(report)"


#: A value of the document a message quotes is cut to this many characters.
QUOTE_CHARS = 80


def quote(value: Any) -> str:
    """``repr(value)``, cut to QUOTE_CHARS: a message never echoes a whole file."""
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "..."


def validate(doc: Any) -> list[str]:
    """Every way ``doc`` departs from the schema, as ``field: problem``, in the schema's order."""
    validator = Draft202012Validator(schema())
    return [f"{field_path(e.absolute_path)}: {e.message.replace(repr(e.instance), quote(e.instance))}"
            for e in validator.iter_errors(doc)]


def not_a_report(doc: Any) -> str | None:
    """Why ``doc`` is no conformance report at all (not one with problems), or None."""
    if isinstance(doc, dict) and doc.get("kind") == "ConformanceReport":
        return None
    if isinstance(doc, dict) and isinstance(doc.get("kind"), str):
        return f"a document of kind {quote(doc['kind'])}, not of kind ConformanceReport"
    if isinstance(doc, dict):
        return f"a mapping without kind: ConformanceReport (its keys: {quote(sorted(map(str, doc))[:8])})"
    return f"{type(doc).__name__ if doc is not None else 'nothing'} ({quote(doc)}), not a mapping"


def check_statistics(doc: Any) -> list[str]:
    """Each profile's statistics equal the lengths of its test lists; no test is in two lists; a
    reason is given only for a test the profile lists as not passed.

    Parts the schema would reject (a missing list, a profile that is no mapping) are passed
    over: ``validate`` reports those.
    """
    problems: list[str] = []
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profiles, list):
        return problems
    for i, profile in enumerate(profiles):
        if not isinstance(profile, dict):
            continue
        stats, tests = profile.get("statistics"), profile.get("tests")
        if not isinstance(stats, dict) or not isinstance(tests, dict):
            continue
        lists = {key: tests[key] for key in _LISTS if isinstance(tests.get(key), list)}
        for key, names in lists.items():
            if key in stats and stats[key] != len(names):
                problems.append(f"profiles[{i}].statistics.{key}: {stats[key]!r} but "
                                f"profiles[{i}].tests.{key} lists {len(names)} test(s)")
        seen: dict[str, str] = {}
        for key, names in lists.items():
            for name in names:
                if not isinstance(name, str):
                    continue
                if name in seen and seen[name] != key:
                    problems.append(f"profiles[{i}].tests: {name!r} is in both {seen[name]} and {key}")
                seen.setdefault(name, key)
        reasons = profile.get("reasons")
        for name in reasons if isinstance(reasons, dict) else ():
            if seen.get(name, "passed") == "passed":
                problems.append(f"profiles[{i}].reasons: {name!r} is not a test of the profile "
                                "that did not pass")
    return problems


def incomplete(doc: dict[str, Any]) -> list[str]:
    """The sections every report has that ``doc`` lacks: a file cut short, or not a whole report."""
    return [key for key in schema()["required"] if key not in doc]


#: A conformance report is some kilobytes; a file this large is something else.
MAX_REPORT_BYTES = 64 << 20


def load_report(path: Path) -> Any:
    """The document in ``path`` (YAML, of which JSON is a part); a UsageError of one line for any
    file that is none: missing, a directory, not a regular file, too large, not UTF-8, not YAML."""
    import stat

    import yaml

    from lbconform.errors import UsageError

    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{path}: a directory, not a file: name the conformance-report.yaml in it")
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path}: not a regular file")
        if info.st_size > MAX_REPORT_BYTES:
            raise UsageError(f"{path}: {info.st_size} bytes, too large for a conformance report")
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not text (no UTF-8 at byte {exc.start}): not YAML or JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise UsageError(f"{path}: not YAML or JSON ({first.strip()})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a conformance report (nested too deeply to read)") from None


def verify(doc: Any) -> list[str]:
    """The problems of a conformance report that show without its evidence: its shape, then its
    arithmetic (``evidence.verify_report`` checks it against its evidence too)."""
    return validate(doc) + check_statistics(doc)
