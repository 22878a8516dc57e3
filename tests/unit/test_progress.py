"""The terminal status line of ``lbconform run``: what it says, and the waits it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from lbconform import progress
from lbconform.wait import WaitTimeout, poll_until


def test_status_line_names_counts_the_running_test_and_the_nearest_deadline() -> None:
    waits = [{"description": "the LB's healthy set to be ['node-1']", "deadline": 1060.0, "timeout": 60.0},
             {"description": "a rollout", "deadline": 1100.0, "timeout": 120.0}]
    line = progress.status_line(12, 41, 1, ["suites/test_a.py::test_x", "suites/test_b.py::test_y"], waits,
                                now=1012.0)
    assert line == ("[12/41] | 1 failed | test_y (+1) | waiting 12s of 60s: the LB's healthy set to be "
                    "['node-1']")
    assert progress.status_line(0, 5, 0, [], [], now=0.0) == "[0/5]"
    assert len(progress.status_line(1, 2, 0, ["t::" + "x" * 300], [], now=0.0, width=80)) == 80


def test_a_wait_is_visible_while_it_lasts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, str(tmp_path))
    seen: list[list[dict[str, object]]] = []

    def probe() -> bool:
        seen.append(progress.read_waits(tmp_path))
        return len(seen) == 2

    poll_until(probe, timeout=5, interval=0.01, description="two looks")
    assert [w["description"] for w in seen[0]] == ["two looks"] and seen[0][0]["timeout"] == 5
    assert progress.read_waits(tmp_path) == []
    with pytest.raises(WaitTimeout):
        poll_until(lambda: False, timeout=0, description="never")
    assert progress.read_waits(tmp_path) == []


def test_no_status_line_in_ci_or_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("CI", "true")
    assert not progress.wanted(Tty())  # type: ignore[arg-type]
    monkeypatch.delenv("CI")
    assert progress.wanted(Tty())  # type: ignore[arg-type]
