"""What lbconform's chaos activities get from their configuration: the provider and the API.

chaostoolkit hands every activity its experiment's configuration as a plain mapping whose
values may be strings (``--var`` gives strings unless typed): these helpers read them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chaoslib.exceptions import ActivityFailed

from lbconform import providers
from lbconform.errors import LbconformError
from lbconform.kube.rawapi import RawApi, api_client
from lbconform.providers.base import Provider

#: The provider experiments use when their configuration names none.
DEFAULT_PROVIDER = "lab"

Configuration = Mapping[str, Any] | None

_TRUE = frozenset({"true", "1", "yes", "on"})


def as_bool(value: object) -> bool:
    """A configuration flag: True, or a string such as ``true``/``yes``/``1``."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def as_list(value: object) -> list[str]:
    """A list of names, given as a list or as one comma-separated string."""
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return [str(i).strip() for i in items if str(i).strip()]


def provider_name(configuration: Configuration) -> str:
    return str((configuration or {}).get("lbconform_provider") or DEFAULT_PROVIDER)


def kubeconfig_path() -> Path:
    """The kubeconfig chaostoolkit-kubernetes uses too: ``$KUBECONFIG``, else ``~/.kube/config``."""
    return Path(os.environ.get("KUBECONFIG") or "~/.kube/config").expanduser()


def kube_api() -> RawApi:
    path = kubeconfig_path()
    if not path.is_file():
        raise ActivityFailed(f"no kubeconfig at {path}: set KUBECONFIG to the target cluster's")
    return RawApi(api_client(path))


def provider(configuration: Configuration) -> Provider:
    """The configured provider, as the run that started the experiment has it: in its mode
    (``lbconform_provider_mode``), with its declaration file over its claims
    (``lbconform_declaration``), and configured with its options and the cluster's API where a
    kubeconfig exists. An experiment restarting MetalLB's speakers through the generic provider
    and MetalLB's declaration finds the speakers where the declaration names them."""
    from lbconform.declared_provider import apply_declaration

    config = configuration or {}
    options: dict[str, str] = {}
    raw = config.get("lbconform_provider_options") or {}
    pairs = raw.items() if isinstance(raw, Mapping) else (p.partition("=")[::2] for p in as_list(raw))
    for name, value in pairs:
        options[str(name)] = str(value)
    try:
        found = providers.load(provider_name(config))
        if config.get("lbconform_provider_mode"):
            found.set_mode(str(config["lbconform_provider_mode"]))
        if config.get("lbconform_declaration"):
            found = apply_declaration(found, str(config["lbconform_declaration"]))
        api = RawApi(api_client(kubeconfig_path())) if kubeconfig_path().is_file() else None
        found.configure(api, options)
    except LbconformError as exc:
        raise ActivityFailed(str(exc)) from None
    return found
