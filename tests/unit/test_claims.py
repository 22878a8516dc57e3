"""Claims among runs: each holder gets a candidate no other holds, the least recently released
first; a released one is free again; with all held, a clear error."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from lbconform.claims import NothingToClaim, claim

ADDRESSES = ["198.18.0.240", "198.18.0.241", "198.18.0.242"]


def test_holders_get_different_candidates(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(claim(tmp_path, ADDRESSES)) for _ in ADDRESSES]
        assert sorted(held) == ADDRESSES
        with pytest.raises(NothingToClaim, match="held by other runs"), claim(tmp_path, ADDRESSES):
            pass


def test_the_least_recently_released_comes_first(tmp_path: Path) -> None:
    for address, released_at in zip(ADDRESSES, (300, 100, 200), strict=True):
        (tmp_path / address).touch()
        os.utime(tmp_path / address, (released_at, released_at))
    with claim(tmp_path, ADDRESSES) as first, claim(tmp_path, ADDRESSES) as second:
        assert (first, second) == ("198.18.0.241", "198.18.0.242")
    assert (tmp_path / "198.18.0.241").stat().st_mtime > 300  # released now


def test_never_released_ones_come_before_any_released(tmp_path: Path) -> None:
    (tmp_path / ADDRESSES[0]).touch()
    with claim(tmp_path, ADDRESSES) as address:
        assert address == ADDRESSES[1]
