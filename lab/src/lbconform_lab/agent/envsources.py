"""A container's environment, from every source the kubelet reads, and the pod's downward API.

Order and precedence are the kubelet's: the Service variables for the API server first,
then ``envFrom`` sources in order (a later one wins, keys prefixed as asked; keys that are
not valid variable names are skipped), then ``env`` entries, which win over ``envFrom``.
``$(VAR)`` references in values are expanded against what came before. A reference that
cannot be met (a missing ConfigMap, Secret or key that is not optional) is the kubelet's
CreateContainerConfigError, with its message.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lbconform_lab import topology as topo
from lbconform_lab.agent.objects import CONFIG_MAP, SECRET, Missing, ObjectCache

Json = Mapping[str, Any]

_SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$")
_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


class ConfigError(Exception):
    """The container cannot be given its configuration (the kubelet's CreateContainerConfigError)."""


def quantity(text: str) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``128Mi``, ``1e3``) as a number."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ConfigError(f"quantity {text!r} is not a Kubernetes quantity")
    return Decimal(match.group(1)) * Decimal(_SUFFIXES[match.group(2)])


@dataclass(frozen=True)
class NodeResources:
    """What a container without a limit is limited by: the node's allocatable."""

    cpu: Decimal
    memory: Decimal

    @classmethod
    def of_machine(cls) -> NodeResources:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return cls(Decimal(os.cpu_count() or 1), Decimal(pages))


def field_ref(pod: Json, path: str, pod_ip: str, host_ip: str) -> str:
    """A pod field as the downward API gives it (env fieldRef and downwardAPI volume files)."""
    meta = pod["metadata"]
    values = {
        "metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"], "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in values:
        return str(values[path])
    if path in ("metadata.labels", "metadata.annotations"):
        source = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(source.items()))
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(key) or {}).get(path[len(prefix) + 2:-2], ""))
    raise ConfigError(f"fieldRef {path} is not supported by the lab")


def resource_field_ref(pod: Json, container_name: str, ref: Json, node: NodeResources) -> str:
    """A container's request or limit (the node's allocatable when no limit is set), in divisor units,
    rounded up as the kubelet does."""
    name = ref.get("containerName") or container_name
    spec = next((c for c in pod["spec"]["containers"] + (pod["spec"].get("initContainers") or [])
                 if c["name"] == name), None)
    if spec is None:
        raise ConfigError(f"resourceFieldRef: no container {name} in the pod")
    kind, _, resource = str(ref["resource"]).partition(".")
    if kind not in ("limits", "requests") or resource not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"resourceFieldRef {ref['resource']} is not supported by the lab")
    resources = spec.get("resources") or {}
    given = (resources.get(kind) or {}).get(resource)
    if given is None and kind == "requests":
        given = (resources.get("limits") or {}).get(resource)
    if given is not None:
        value = quantity(given)
    elif kind == "requests":
        value = Decimal(0)
    else:
        value = node.cpu if resource == "cpu" else node.memory
    divisor = quantity(ref.get("divisor") or "1")
    return str(math.ceil(value / divisor))


def _expand(value: str, env: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _REFERENCE.sub(one, value)


def container_env(pod: Json, spec: Json, pod_ip: str, host_ip: str, objects: ObjectCache,
                  node: NodeResources) -> dict[str, str]:
    """The environment of container ``spec`` of ``pod``; raises ConfigError as the kubelet would."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "HOSTNAME": pod["metadata"]["name"],
           "KUBERNETES_SERVICE_HOST": topo.KUBERNETES_SERVICE_IP, "KUBERNETES_SERVICE_PORT": "443",
           "KUBERNETES_SERVICE_PORT_HTTPS": "443",
           "KUBERNETES_PORT": f"tcp://{topo.KUBERNETES_SERVICE_IP}:443"}
    ns = pod["metadata"]["namespace"]
    try:
        for source in spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for kind, field in ((CONFIG_MAP, "configMapRef"), (SECRET, "secretRef")):
                if field in source:
                    ref = source[field]
                    data = objects.get(kind, ns, ref["name"], bool(ref.get("optional")))
                    for key, raw in (data.items if data else {}).items():
                        if _VAR_NAME.match(prefix + key):
                            env[prefix + key] = raw.decode(errors="replace")
        for var in spec.get("env") or []:
            value = _value(pod, spec, var, env, pod_ip, host_ip, objects, node)
            if value is not None:
                env[var["name"]] = value
    except Missing as exc:
        raise ConfigError(str(exc)) from exc
    return env


def _value(pod: Json, spec: Json, var: Json, env: Mapping[str, str], pod_ip: str, host_ip: str,
           objects: ObjectCache, node: NodeResources) -> str | None:
    """One ``env`` entry's value; None when an optional source is missing (the variable is unset)."""
    if "valueFrom" not in var:
        return _expand(str(var.get("value", "")), env)
    source = var["valueFrom"]
    ns = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
    if "resourceFieldRef" in source:
        return resource_field_ref(pod, spec["name"], source["resourceFieldRef"], node)
    for kind, field in ((CONFIG_MAP, "configMapKeyRef"), (SECRET, "secretKeyRef")):
        if field in source:
            ref = source[field]
            optional = bool(ref.get("optional"))
            data = objects.get(kind, ns, ref["name"], optional)
            if data is None or (optional and ref["key"] not in data.items):
                return None
            return data.key(ref["key"]).decode(errors="replace")
    raise ConfigError(f"env {var['name']}: valueFrom {sorted(source)} is not supported by the lab")
