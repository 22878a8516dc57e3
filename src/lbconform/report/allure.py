"""Allure helpers: labels that file tests under profile/feature/story, attachments, environment.

allure-pytest reads a test's labels from ``allure_label`` markers (``label_type=`` names the
label) when the test's teardown ends, so markers added at collection time label the result.
Attachments go through ``allure.attach``, which is a no-op without ``--alluredir`` but fails
outside a running test; the wrappers here never fail a test over a report detail.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import allure
import allure_commons
import pytest

from lbconform.report.model import RunInfo

log = logging.getLogger(__name__)

#: allure_pytest.utils.ALLURE_LABEL_MARK (allure-pytest ships no type information to import it by).
LABEL_MARK: Final = "allure_label"
EPIC, FEATURE, STORY = "epic", "feature", "story"
ENVIRONMENT_FILE: Final = "environment.properties"


def label_markers(profile: str, features: Iterable[str], story: str) -> list[pytest.MarkDecorator]:
    """Marks for ``item.add_marker``: epic = the profile, a feature label per feature, the story.

    For ``--allure-epics``/``--allure-features`` to select by them, add them in a ``tryfirst``
    ``pytest_collection_modifyitems``: allure-pytest's own (a plain hook) selects by label.
    """
    mark = getattr(pytest.mark, LABEL_MARK)
    marks = [mark(profile, label_type=EPIC)]
    names = list(features)
    if names:
        marks.append(mark(*names, label_type=FEATURE))
    if story:
        marks.append(mark(story, label_type=STORY))
    return marks


def attach_json(name: str, obj: Any) -> bool:
    """Attach ``obj`` as JSON to the running test's Allure result; False if nothing was attached."""
    body = json.dumps(obj, indent=2, sort_keys=True, default=str)
    return _attach(body, name, allure.attachment_type.JSON)


def attach_text(name: str, text: str) -> bool:
    """Attach plain text to the running test's Allure result; False if nothing was attached."""
    return _attach(text, name, allure.attachment_type.TEXT)


def attach_png(path: Path, name: str) -> bool:
    """Attach a PNG file (a timeline) to the running test's Allure result."""
    return _attach(path.read_bytes(), name, allure.attachment_type.PNG)


def _attach(body: str | bytes, name: str, kind: Any) -> bool:
    if not allure_commons.plugin_manager.hook.attach_data.get_hookimpls():
        return False  # allure-pytest is not reporting (no --alluredir)
    try:
        allure.attach(body, name=name, attachment_type=kind)
    except Exception as exc:
        # Outside a test (e.g. at session end) allure's reporter has no item to attach to.
        log.debug("allure attachment %r dropped: %s", name, exc)
        return False
    return True


def run_environment(run: RunInfo) -> dict[str, str]:
    """The run's facts as Allure's report shows them in its Environment widget."""
    impl = run.implementation
    return {
        "implementation": " ".join(p for p in (impl.organization, impl.project) if p),
        "implementation.version": impl.version,
        "provider": run.provider,
        "mode": run.mode,
        "target": run.target,
        "kubernetes.version": run.kubernetes_version,
        "nodes": ", ".join(run.nodes),
        "profiles": ", ".join(run.profiles),
        "lbconform.version": run.lbconform_version,
        "run.id": run.run_id,
        "date": run.date,
    }


def write_environment(allure_dir: Path, props: Mapping[str, str]) -> Path:
    """Write ``environment.properties`` into ``allure_dir`` (created if missing)."""
    allure_dir.mkdir(parents=True, exist_ok=True)
    path = allure_dir / ENVIRONMENT_FILE
    text = "".join(f"{escape(k, key=True)}={escape(v)}\n" for k, v in props.items())
    path.write_text(text, encoding="ascii")
    return path


_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f",
                   "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def escape(text: str, *, key: bool = False) -> str:
    """Escape as java.util.Properties.store does; the file is read as ISO-8859-1, so ASCII only.

    Spaces are escaped everywhere in a key and leading in a value (the reader strips them);
    characters outside printable ASCII become ``\\uXXXX`` (UTF-16, surrogate pairs and all).
    """
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch == " ":
            out.append("\\ " if key or i == 0 else " ")
        elif " " < ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be")
            out += [f"\\u{int.from_bytes(units[j:j + 2]):04X}" for j in range(0, len(units), 2)]
    return "".join(out)
