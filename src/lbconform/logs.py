"""The tail of a process's log file, folded to one line for an error message."""

from __future__ import annotations

from pathlib import Path


def log_tail(path: str | Path, lines: int = 5) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(t.strip() for t in text[-lines:])
