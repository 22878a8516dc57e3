"""The reference LB's conntrack deletions: one the kernel interrupted runs again until it went
through the table, and the entries each run deleted are counted once."""

from __future__ import annotations

import sys
from pathlib import Path

from lbconform_lab.lb import flows

INTERRUPTED = "conntrack v1.4.7 (conntrack-tools): Operation failed: Interrupted system call"


def fake_conntrack(tmp_path: Path, runs: list[tuple[int, int, str]]) -> list[str]:
    """An argv standing in for ``conntrack -D``: its Nth run prints ``runs[N]``'s count of entries,
    that stderr, and exits with that code (the last run repeats)."""
    script = tmp_path / "conntrack.py"
    script.write_text(
        "import pathlib, sys\n"
        f"runs = {runs!r}\n"
        f"state = pathlib.Path({str(tmp_path / 'calls')!r})\n"
        "n = int(state.read_text()) if state.exists() else 0\n"
        "state.write_text(str(n + 1))\n"
        "code, entries, err = runs[min(n, len(runs) - 1)]\n"
        "print('\\n'.join(f'tcp 6 entry {i}' for i in range(entries)))\n"
        "print(err, file=sys.stderr)\n"
        "sys.exit(code)\n")
    return [sys.executable, str(script)]


def calls(tmp_path: Path) -> int:
    return int((tmp_path / "calls").read_text())


def test_an_interrupted_deletion_runs_again_and_counts_every_entry(tmp_path: Path) -> None:
    argv = fake_conntrack(tmp_path, [(1, 2, INTERRUPTED), (1, 0, INTERRUPTED),
                                     (0, 3, "3 flow entries have been deleted.")])
    assert flows.delete(argv) == 5
    assert calls(tmp_path) == 3


def test_a_deletion_that_found_nothing_is_complete(tmp_path: Path) -> None:
    none = "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted."
    argv = fake_conntrack(tmp_path, [(1, 0, none)])
    assert flows.delete(argv) == 0
    assert calls(tmp_path) == 1


def test_a_deletion_always_interrupted_gives_up_after_its_attempts(tmp_path: Path) -> None:
    argv = fake_conntrack(tmp_path, [(1, 1, INTERRUPTED)])
    assert flows.delete(argv) == flows.ATTEMPTS
    assert calls(tmp_path) == flows.ATTEMPTS
