"""The datasheet: every measurement of one run, beside the value the provider declared.

Markdown, for people: what the harness measured (time to unhealthy, idle timeout, resets per
rollout) next to what the implementation's documentation promises. The declared values come
first, each saying where it came from: the provider, or a declaration file with the link to the
documentation that states it. The conformance report carries the same for machines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from lbconform.report.model import Measurement, RunInfo

NONE = "—"
_COLUMNS = ("measurement", "value", "unit", "declared", "difference", "test")


def render(measurements: Iterable[Measurement], run: RunInfo) -> str:
    """The datasheet, rows sorted by feature (measurements of none last), then name."""
    impl = run.implementation
    title = " ".join(p for p in (impl.organization, impl.project, impl.version) if p)
    lines = [
        f"# Datasheet: {title or 'unknown implementation'}",
        "",
        f"Provider `{run.provider}` (mode {run.mode or NONE}) on a {run.target} target, "
        f"Kubernetes {run.kubernetes_version}, {run.date}, run `{run.run_id}`, "
        f"lbconform {run.lbconform_version}.",
        "",
        *declared_values(run),
    ]
    rows = sorted(measurements, key=lambda m: (m.feature is None, m.feature or "", m.name, m.test))
    if not rows:
        lines.append("No measurements were recorded in this run.")
        return "\n".join(lines) + "\n"
    lines.append(_row(_COLUMNS))
    lines.append(_row(("---", "---:", "---", "---:", "---:", "---")))
    for m in rows:
        difference = m.difference
        lines.append(_row((
            m.name,
            number(m.value),
            m.unit,
            NONE if m.declared is None else number(m.declared),
            NONE if difference is None else number(difference, signed=True),
            m.test or NONE,
        )))
    return "\n".join(lines) + "\n"


def declared_values(run: RunInfo) -> list[str]:
    """The run's declared values (notes aside: the report has them), each with where it came from,
    and the values a declaration file gives for one externalTrafficPolicy."""
    if not run.declared:
        return []
    lines = ["Declared values, each the provider's or the declaration file's (with its source):", ""]
    for name, value in run.declared.items():
        if name == "notes":
            continue
        origin = run.declared_sources.get(name, {})
        lines.append(f"- `{name}`: {_value(value)}{_origin(origin)}")
        for policy, given in (origin.get("perPolicy") or {}).items():
            lines.append(f"  - externalTrafficPolicy {policy}: {_value(given.get('value'))}{_origin(given)}")
    return [*lines, ""]


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return number(value)
    return f"`{value}`"


def _origin(origin: Mapping[str, Any]) -> str:
    """`` (provider)``, `` (declaration, [source](https://...))``; nothing where the run says nothing."""
    if not origin.get("from"):
        return ""
    source = str(origin.get("source") or "")
    link = f"[source]({source})" if source.startswith(("https://", "http://")) else f"source `{source}`"
    return f" ({origin['from']}{', ' + link if source else ''})"


def number(value: float, *, signed: bool = False) -> str:
    """Integers as integers, others to three decimals without trailing zeros (1 ms for seconds).

    A value too small for three decimals keeps three significant digits, so it never reads 0.
    """
    sign = "+" if signed and value > 0 else ""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{sign}{int(value)}"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    if text in ("0", "-0"):
        text = f"{value:.3g}"
    return f"{sign}{text}"


def _row(cells: Iterable[str]) -> str:
    # A pipe in a test's parameters would end its cell.
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
