"""lbconform's pytest plugin (entry point ``pytest11``): markers the suites and tests use."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: needs root and the lab; boots one or reuses a running one")
    config.addinivalue_line(
        "markers", "lab_lifecycle: boots and removes labs itself; runs without a shared lab")
