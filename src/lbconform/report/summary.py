"""``reports/summary.md``: a run at a glance, for people and for CI job summaries.

It is rendered from the conformance report (never from pytest's state), so the summary and the
submitted report cannot disagree: per profile its result and counts, per feature the outcome,
the tests that failed or were not supported, each with the reason the report gives, then the
datasheet's measurements.
"""

from __future__ import annotations

from typing import Any

#: The outcome lists of a profile, in the order a summary shows them.
OUTCOMES = (("passed", "passed"), ("failed", "failed"), ("errors", "errors"), ("skipped", "skipped"),
            ("notSupported", "not supported"))


def _implementation(doc: dict[str, Any]) -> str:
    impl = doc.get("implementation") or {}
    name = " ".join(str(impl.get(k) or "") for k in ("organization", "project", "version")).strip()
    return name or "unknown implementation"


def render(doc: dict[str, Any], datasheet: str | None = None) -> str:
    """The Markdown summary of conformance report ``doc``, with ``datasheet`` (its Markdown) after."""
    target, meta = doc.get("target") or {}, doc.get("metadata") or {}
    out = [f"# lbconform: {_implementation(doc)}", "",
           f"Provider `{target.get('provider', '?')}` (mode {target.get('mode', '?')}) on a "
           f"{target.get('kind', '?')} target, Kubernetes {target.get('kubernetesVersion', '?')}, "
           f"{meta.get('date', '?')}, run `{meta.get('runId', '?')}`.", "",
           "| profile | result | " + " | ".join(label for _, label in OUTCOMES) + " |",
           "| --- | --- |" + " ---: |" * len(OUTCOMES)]
    profiles = doc.get("profiles") or []
    for p in profiles:
        stats = p.get("statistics") or {}
        out.append(f"| {p.get('name')} | **{p.get('result')}** | "
                   + " | ".join(str(stats.get(key, 0)) for key, _ in OUTCOMES) + " |")
    for p in profiles:
        out += ["", f"## {p.get('name')}", "", "| feature | outcome |", "| --- | --- |"]
        features = p.get("features") or {}
        for key, label in OUTCOMES:
            out += [f"| {f} | {label} |" for f in features.get(key) or []]
        tests, reasons = p.get("tests") or {}, p.get("reasons") or {}
        for key, label in OUTCOMES[1:]:
            if tests.get(key):
                out += ["", f"{label.capitalize()}:", ""] + [
                    f"- `{t}`: {reasons[t]}" if reasons.get(t) else f"- `{t}`" for t in tests[key]]
    if datasheet:
        body = datasheet.split("\n", 1)[1] if datasheet.startswith("# ") else datasheet
        out += ["", "## Datasheet", "", body.strip()]
    return "\n".join(out) + "\n"
