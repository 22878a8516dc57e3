"""Providers, found through the ``lbconform.providers`` entry-point group."""

from __future__ import annotations

from importlib.metadata import entry_points

from lbconform.errors import UsageError
from lbconform.providers.base import Provider

GROUP = "lbconform.providers"


def available() -> dict[str, str]:
    """Provider name -> the object reference that implements it."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load(name: str) -> Provider:
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in eps:
        raise UsageError(f"no provider named {name!r}: installed providers are {', '.join(sorted(eps))}")
    cls = eps[name].load()
    provider = cls()
    if not isinstance(provider, Provider):
        raise UsageError(f"provider {name!r} ({eps[name].value}) is not an lbconform Provider")
    return provider
