"""The declaration's ``interface``: how the harness asks an implementation for things and sees what
it did, through the cluster alone, as data.

A provider in Python answers these in code (``Provider.idle_timeout_annotations``,
``backend_pool``...); a vendor with no Python states them in the declaration file instead, and
``DeclaredProvider`` answers from them. This module owns that section: its dataclasses, checking it
(each mistake a ``Problem`` naming the field), writing it back, and the pure parts of acting on it
(annotation templates, reading a backend pool out of the objects the implementation publishes). The
requests are annotations on the Service, as every implementation in the field takes them; the pool
is read from Kubernetes objects the implementation writes (MetalLB's ``ServiceL2Status``, the lab's
``BackendPool``), each member a field of them or the InternalIP of a node they name.

A field path names a value inside an object: keys joined by dots, a key that holds dots or slashes
in brackets (``metadata.labels[metallb.io/node]``).
"""

from __future__ import annotations

import ipaddress
import itertools
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lbconform.providers.base import PoolMember

#: The placeholders each template takes: ``{seconds}`` of the idle timeout, ``{reset}`` (true or
#: false), ``{address}`` requested, ``{namespace}`` and ``{name}`` of the Service.
IDLE_SECONDS, RESET, ADDRESS, NAMESPACE, NAME = "seconds", "reset", "address", "namespace", "name"
#: Enough addresses for the suites' requests: a /16 is not listed whole.
MAX_REQUESTABLE: Final = 64
#: The workload kinds the harness restarts (a rollout restart, as an upgrade does).
WORKLOAD_KINDS: Final = ("Deployment", "DaemonSet")
FIELDS: Final = ("serviceAnnotations", "idleTimeout", "idleReset", "addressRequest", "podPool",
                 "needsNodePorts", "backendPool", "controller", "nodeAgents")
POOL_FIELDS: Final = ("apiVersion", "resource", "namespace", "objectName", "match", "members", "address",
                      "node", "memberName", "healthy")
_PATH_PART = re.compile(r"\[([^\[\]]+)\]|([^.\[\]]+)")


class Problem(Exception):
    """One mistake in the ``interface`` section: where (``interface.idleTimeout.seconds``) and what."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


# --- field paths and templates ------------------------------------------------------------------------
def parse_path(text: Any, where: str) -> tuple[str, ...]:
    """``status.members`` -> ("status", "members"); ``metadata.labels[a.b/c]`` -> (..., "a.b/c")."""
    if not isinstance(text, str) or not text.strip():
        raise Problem(where, f"must be a field path such as status.members, got {text!r}")
    parts, pos = [], 0
    while pos < len(text):
        match = _PATH_PART.match(text, pos)
        if match is None:
            raise Problem(where, f"{text!r} is not a field path: keys joined by dots, a key with dots "
                                 "in brackets (metadata.labels[metallb.io/node])")
        parts.append(match.group(1) or match.group(2))
        pos = match.end()
        if pos < len(text) and text[pos] == ".":
            pos += 1
            if pos == len(text):
                raise Problem(where, f"{text!r} ends with a dot")
    return tuple(parts)


def show_path(path: tuple[str, ...]) -> str:
    return "".join(f"[{p}]" if "." in p or "/" in p else (f".{p}" if i else p) for i, p in enumerate(path))


def lookup(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in ``obj``, or None where a key is missing."""
    for key in path:
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _template(text: Any, allowed: tuple[str, ...], where: str) -> str:
    if not isinstance(text, str):
        raise Problem(where, f"must be a string, got {text!r}")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise Problem(where, f"{text!r} is not a template ({exc}): write braces as {{{{ and }}}}") from None
    unknown = sorted(names - set(allowed))
    if unknown:
        takes = ", ".join(f"{{{a}}}" for a in allowed) or "no placeholder"
        raise Problem(where, f"unknown placeholder {{{unknown[0]}}}: this template takes {takes}")
    return text


def fill(templates: Mapping[str, str], **values: str) -> dict[str, str]:
    """The annotations ``templates`` with their placeholders filled."""
    return {key: text.format_map(values) for key, text in templates.items()}


def fill_one(template: str, namespace: str, name: str) -> str:
    """A template of the Service's ``{namespace}`` and ``{name}`` filled."""
    return template.format_map({NAMESPACE: namespace, NAME: name})


def expand_addresses(entries: Iterable[str], most: int = MAX_REQUESTABLE) -> list[str]:
    """Addresses, CIDRs and ``first-last`` ranges as at most ``most`` single addresses."""
    out: list[str] = []
    for entry in entries:
        left = most - len(out)
        if left <= 0:
            break
        if "-" in entry:
            first, last = (ipaddress.ip_address(a.strip()) for a in entry.split("-", 1))
            end = min(int(last), int(first) + left - 1)
            out += [str(ipaddress.ip_address(i)) for i in range(int(first), end + 1)]
            continue
        net = ipaddress.ip_network(entry.strip(), strict=False)
        hosts = [net.network_address] if net.num_addresses == 1 else list(itertools.islice(net.hosts(), left))
        out += [str(a) for a in hosts]
    return out


# --- the section's parts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadRef:
    """A Deployment or DaemonSet of the implementation, by namespace and name."""

    kind: str
    namespace: str
    name: str
    description: str = ""


@dataclass(frozen=True)
class PoolSource:
    """Where a Service's backend pool shows in the cluster: objects of ``resource`` (a plural) in
    ``namespace``, the one named ``object_name`` or those whose fields ``match`` the Service; each
    object's ``members`` list (or the object itself as one member); a member's address at
    ``address``, or the InternalIP of the node named at the first of ``node`` that has a value."""

    api_version: str
    resource: str
    namespace: str = "{namespace}"
    object_name: str | None = None
    match: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    members: tuple[str, ...] | None = None
    address: tuple[str, ...] | None = None
    node: tuple[tuple[str, ...], ...] = ()
    member_name: tuple[str, ...] | None = None
    healthy: tuple[str, ...] | None = None

    def collection(self, namespace: str, name: str) -> str:
        """The API path of the objects to read for the Service ``namespace/name``."""
        group = "api" if "/" not in self.api_version else "apis"
        where = fill_one(self.namespace, namespace, name)
        return f"/{group}/{self.api_version}/namespaces/{where}/{self.resource}"

    def object_path(self, namespace: str, name: str) -> str | None:
        if self.object_name is None:
            return None
        return f"{self.collection(namespace, name)}/{fill_one(self.object_name, namespace, name)}"

    def pool(self, objects: Iterable[Mapping[str, Any]], namespace: str, name: str,
             node_ips: Mapping[str, str]) -> list[PoolMember]:
        """The members the ``objects`` show for the Service ``namespace/name``, sorted, each once."""
        wanted = {path: fill_one(text, namespace, name) for path, text in self.match.items()}
        found: dict[tuple[str, str], PoolMember] = {}
        for obj in objects:
            if any(str(lookup(obj, path)) != value for path, value in wanted.items()):
                continue
            entries = [obj] if self.members is None else lookup(obj, self.members) or []
            for entry in entries if isinstance(entries, list) else []:
                member = self._member(entry, node_ips)
                if member is not None:
                    found[member.name, member.address] = member
        return [found[key] for key in sorted(found)]

    def _member(self, entry: Any, node_ips: Mapping[str, str]) -> PoolMember | None:
        healthy = None if self.healthy is None else lookup(entry, self.healthy)
        healthy = healthy if isinstance(healthy, bool) else None
        if self.node:
            node = next((str(v) for v in (lookup(entry, p) for p in self.node) if v), None)
            if node is None:
                return None
            return PoolMember(address=node_ips.get(node, ""), healthy=healthy, name=node)
        assert self.address is not None
        address = lookup(entry, self.address)
        if not address:
            return None
        name = lookup(entry, self.member_name) if self.member_name is not None else None
        return PoolMember(address=str(address), healthy=healthy, name=str(name or address))


@dataclass(frozen=True)
class Interface:
    """The ``interface`` section, checked; None where the file does not say (the provider's answer
    then stands)."""

    service_annotations: Mapping[str, str] | None = None
    idle_timeout_annotations: Mapping[str, str] | None = None
    idle_timeout_seconds: int | None = None
    idle_reset_annotations: Mapping[str, str] | None = None
    address_annotations: Mapping[str, str] | None = None
    requestable_addresses: tuple[str, ...] | None = None
    pod_pool_annotations: Mapping[str, str] | None = None
    needs_node_ports: bool | None = None
    backend_pool: PoolSource | None = None
    controller: WorkloadRef | None = None
    node_agents: WorkloadRef | None = None
    #: The section as the file gives it (written back as it came).
    raw: Mapping[str, Any] = field(default_factory=dict)


# --- checking the section -----------------------------------------------------------------------------------
def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise Problem(where, f"must be a mapping, got {'a list' if isinstance(raw, list) else repr(raw)}")
    return raw


def _known(raw: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in known:
            raise Problem(f"{where}.{key}", f"unknown field: the fields are {', '.join(known)}")


def _annotations(raw: Any, allowed: tuple[str, ...], where: str) -> dict[str, str]:
    out = {}
    for key, text in _mapping(raw, where).items():
        if not isinstance(key, str) or not key.strip():
            raise Problem(where, f"annotation names are non-empty strings, got {key!r}")
        out[key] = _template(text, allowed, f"{where}.{key}")
    return out


def _request(raw: Any, where: str, allowed: tuple[str, ...], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    section = _mapping(raw, where)
    _known(section, ("annotations", *extra), where)
    if "annotations" not in section and not extra:
        raise Problem(f"{where}.annotations", "missing: the annotations that ask for it")
    if "annotations" in section:
        section = {**section, "annotations": _annotations(section["annotations"], allowed,
                                                          f"{where}.annotations")}
    return section


def _addresses(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise Problem(where, f"must be a list of addresses, CIDRs or first-last ranges, got {raw!r}")
    for i, entry in enumerate(raw):
        try:
            if not isinstance(entry, str):
                raise ValueError(entry)
            expand_addresses([entry], 1)
        except ValueError:
            raise Problem(f"{where}[{i}]",
                          f"must be an address, a CIDR or a first-last range, got {entry!r}") from None
    return tuple(raw)


def _workload(raw: Any, where: str) -> WorkloadRef:
    section = _mapping(raw, where)
    _known(section, ("kind", "namespace", "name", "description"), where)
    for key in ("kind", "namespace", "name"):
        if not isinstance(section.get(key), str) or not section[key].strip():
            raise Problem(f"{where}.{key}", "missing: give the workload's kind, namespace and name")
    if section["kind"] not in WORKLOAD_KINDS:
        raise Problem(f"{where}.kind", f"must be one of {', '.join(WORKLOAD_KINDS)}, got {section['kind']!r}")
    return WorkloadRef(section["kind"], section["namespace"], section["name"],
                       str(section.get("description") or ""))


def _pool(raw: Any, where: str) -> PoolSource:
    section = _mapping(raw, where)
    _known(section, POOL_FIELDS, where)
    for key in ("apiVersion", "resource"):
        if not isinstance(section.get(key), str) or not section[key].strip():
            raise Problem(f"{where}.{key}", "missing: give the objects' apiVersion and resource (plural)")
    if ("address" in section) == ("node" in section):
        raise Problem(where, "give one of address (a member's address) or node (the node whose "
                             "InternalIP it is)")
    if ("objectName" in section) == ("match" in section):
        raise Problem(where, "give one of objectName (one object per Service) or match (the fields "
                             "that name the Service)")
    service = (NAMESPACE, NAME)
    nodes = section.get("node")
    node_paths = [nodes] if isinstance(nodes, str) else nodes if nodes is not None else []
    if not isinstance(node_paths, list):
        raise Problem(f"{where}.node",
                      "must be a field path or a list of them (the first with a value counts)")

    def path(key: str) -> tuple[str, ...] | None:
        return parse_path(section[key], f"{where}.{key}") if key in section else None

    return PoolSource(
        api_version=section["apiVersion"], resource=section["resource"],
        namespace=_template(section.get("namespace", "{namespace}"), service, f"{where}.namespace"),
        object_name=(_template(section["objectName"], service, f"{where}.objectName")
                     if "objectName" in section else None),
        match={parse_path(k, f"{where}.match"): _template(v, service, f"{where}.match.{k}")
               for k, v in _mapping(section.get("match", {}), f"{where}.match").items()},
        members=path("members"), address=path("address"),
        node=tuple(parse_path(p, f"{where}.node[{i}]") for i, p in enumerate(node_paths)),
        member_name=path("memberName"), healthy=path("healthy"))


def parse(raw: Any, where: str = "interface") -> Interface:
    """The ``interface`` section as the file gives it, checked."""
    section = _mapping(raw, where)
    _known(section, FIELDS, where)
    idle = _request(section["idleTimeout"], f"{where}.idleTimeout", (IDLE_SECONDS,), ("seconds",)) \
        if "idleTimeout" in section else {}
    if idle and "annotations" not in idle:
        raise Problem(f"{where}.idleTimeout.annotations", "missing: the annotations that ask for it")
    seconds = idle.get("seconds")
    if idle and (isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 86400):
        raise Problem(f"{where}.idleTimeout.seconds", "must be the whole seconds the idle suites' Services "
                                                      f"ask for, from 1 to 86400, got {seconds!r}")
    reset = _request(section["idleReset"], f"{where}.idleReset", (RESET,)) if "idleReset" in section else {}
    request = _request(section["addressRequest"], f"{where}.addressRequest", (ADDRESS,), ("addresses",)) \
        if "addressRequest" in section else {}
    if request and "addresses" not in request:
        raise Problem(f"{where}.addressRequest.addresses",
                      "missing: the addresses held for Services that ask")
    pod = _request(section["podPool"], f"{where}.podPool", ()) if "podPool" in section else {}
    node_ports = section.get("needsNodePorts")
    if node_ports is not None and not isinstance(node_ports, bool):
        raise Problem(f"{where}.needsNodePorts", f"must be true or false, got {node_ports!r}")
    return Interface(
        service_annotations=(_annotations(section["serviceAnnotations"], (), f"{where}.serviceAnnotations")
                             if "serviceAnnotations" in section else None),
        idle_timeout_annotations=idle.get("annotations"), idle_timeout_seconds=seconds,
        idle_reset_annotations=reset.get("annotations"),
        address_annotations=request.get("annotations", {} if request else None),
        requestable_addresses=(_addresses(request["addresses"], f"{where}.addressRequest.addresses")
                               if request else None),
        pod_pool_annotations=pod.get("annotations"), needs_node_ports=node_ports,
        backend_pool=_pool(section["backendPool"], f"{where}.backendPool")
        if "backendPool" in section else None,
        controller=_workload(section["controller"], f"{where}.controller")
        if "controller" in section else None,
        node_agents=_workload(section["nodeAgents"], f"{where}.nodeAgents")
        if "nodeAgents" in section else None,
        raw=section)
