from __future__ import annotations

import pytest

from lbconform import providers
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.providers.base import NotSupported, ServiceRef


def test_providers_load_by_entry_point() -> None:
    assert {"lab", "generic"} <= set(providers.available())
    lab = providers.load("lab")
    assert lab.name == "lab" and lab.features() == set(Feature)
    assert lab.declared().time_to_unhealthy == 4.0


def test_generic_cannot_read_pools() -> None:
    generic = providers.load("generic")
    assert Feature.BACKEND_POOL not in generic.features()
    with pytest.raises(NotSupported):
        generic.backend_pool(ServiceRef("ns", "svc"))


def test_unknown_provider_lists_the_installed_ones() -> None:
    with pytest.raises(UsageError, match=r"no provider named 'aks'.*generic, lab"):
        providers.load("aks")
