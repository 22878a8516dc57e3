"""Lab tests: real control plane, real kube-proxy, real kernel. They need root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="lab tests need root (network namespaces, nftables)")
        for item in items:
            if "tests/lab" in str(item.fspath):
                item.add_marker(skip)
    # Lifecycle tests boot their own labs: run them before the shared lab exists.
    items.sort(key=lambda i: 0 if i.get_closest_marker("lab_lifecycle") else 1)
