"""What the reference LB saves for the process that replaces it, and what that process starts from.

Only the saving and loading run here (no informer is started, nothing is reconciled); that a
restarted LB keeps its flows is a lab test (``tests/lab/test_lb.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lbconform_lab.lb.controller import Controller, ServiceState

NO_API: object = None


def controller(state_file: Path, defects: set[str] | None = None) -> Controller:
    return Controller(NO_API, "node", defects or set(), state_file)  # type: ignore[arg-type]


def test_defects_health_and_the_address_cursor_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "lb-state.json"
    old = controller(state, {"ignore-health"})
    old.set_defects({"no-drain"}, run="run1")
    old.set_defects({"short-idle"})
    old.next_vip = 7
    old.services["ns/a"] = ServiceState("ns/a", "uid-a", "198.18.0.10", 1, healthy=["node-2", "node-1"])
    old._publish()  # a pass ends
    saved = json.loads(state.read_text())["healthy"]
    assert saved == {"ns/a": {"uid": "uid-a", "backends": ["node-1", "node-2"]}}

    new = controller(state, {"ignore-health"})  # the command line's defects were the lab's at boot
    assert new.defects == {"short-idle"} and new.run_defects == {"run1": {"no-drain"}}
    assert new.next_vip == 7 and new.warm == {"ns/a": ("uid-a", {"node-1", "node-2"})}


def test_without_a_saved_state_the_command_line_holds(tmp_path: Path) -> None:
    fresh = controller(tmp_path / "lb-state.json", {"ignore-health"})
    assert fresh.defects == {"ignore-health"} and fresh.warm == {} and fresh.next_vip == 0
    assert not (tmp_path / "lb-state.json").exists()


def test_the_state_is_written_only_when_it_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "lb-state.json"
    c = controller(state)
    c._save()
    written = state.stat().st_mtime_ns
    monkeypatch.setattr(Path, "write_text", lambda *_: pytest.fail("written again"))
    c._save()
    assert state.stat().st_mtime_ns == written


def test_defects_switched_before_the_first_pass_keep_the_saved_health(tmp_path: Path) -> None:
    """A restarted LB saves again when its defects are switched before its first pass has a view:
    the healthy backends it loaded stay saved (a second restart still starts from them)."""
    state = tmp_path / "lb-state.json"
    old = controller(state)
    old.services["ns/a"] = ServiceState("ns/a", "uid-a", "198.18.0.10", 1, healthy=["node-1"])
    old._publish()
    new = controller(state)
    new.set_defects({"no-drain"})
    assert json.loads(state.read_text())["healthy"] == {"ns/a": {"uid": "uid-a", "backends": ["node-1"]}}
