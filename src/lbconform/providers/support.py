"""What the provider plugins share: lazy SDK imports and the index of the cluster's nodes.

Cloud SDKs are optional extras (``pip install 'lbconform[azure]'``); a provider imports its
SDK only when it first talks to the cloud, so that listing or loading providers never needs
them, and a missing one is a one-line usage error that names the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lbconform.errors import UsageError

if TYPE_CHECKING:
    from lbconform.kube.rawapi import RawApi


def import_sdk(extra: str, module: str) -> ModuleType:
    """``module``, or a UsageError that names the optional extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"the {extra} provider needs its SDK: pip install 'lbconform[{extra}]'") from None


def require_api(api: RawApi | None, provider: str, what: str) -> RawApi:
    if api is None:
        raise UsageError(f"the {provider} provider reads {what} from the cluster: "
                         "it must be configured with the target cluster first")
    return api


@dataclass(frozen=True)
class NodeIndex:
    """The cluster's nodes by name, InternalIP and providerID (lower-cased, scheme stripped)."""

    ip_by_name: dict[str, str] = field(default_factory=dict)
    name_by_ip: dict[str, str] = field(default_factory=dict)
    ip_by_provider_id: dict[str, str] = field(default_factory=dict)


def node_index(nodes: Mapping[str, Any]) -> NodeIndex:
    """Index a NodeList (``GET /api/v1/nodes``) by name, InternalIP and providerID."""
    index = NodeIndex()
    for node in nodes.get("items", []):
        name = node.get("metadata", {}).get("name", "")
        addresses = {a.get("type"): a.get("address", "") for a in node.get("status", {}).get("addresses", [])}
        ip = addresses.get("InternalIP", "")
        if not name or not ip:
            continue
        index.ip_by_name[name] = ip
        index.name_by_ip[ip] = name
        provider_id = provider_id_key(node.get("spec", {}).get("providerID", ""))
        if provider_id:
            index.ip_by_provider_id[provider_id] = ip
    return index


def provider_id_key(provider_id: str) -> str:
    """``aws:///us-east-1a/i-0abc`` -> ``/us-east-1a/i-0abc``; lower-cased (Azure IDs vary in case)."""
    _, sep, rest = provider_id.partition("://")
    return (rest if sep else provider_id).lower()


def cluster_nodes(api: RawApi | None) -> NodeIndex:
    """The node index of the configured cluster, or an empty one without a cluster."""
    return node_index(api.get("/api/v1/nodes")) if api is not None else NodeIndex()
