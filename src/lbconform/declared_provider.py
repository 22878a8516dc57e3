"""A provider whose claims a declaration file overrides value by value, and where each value came from.

``DeclaredProvider`` wraps any provider (the generic one, for an implementation with no Python of
its own): ``features()``, ``declared()``, ``declared_for()``, ``ip_mode()`` and ``timeouts()``
answer from the declaration (``lbconform.declaration``) where it gives a value and from the
provider where it does not; every other method, and any attribute of the provider's own, is the
provider's. A wrapper, rather than a subclass made on the fly or a provider method that installs
overrides: it takes any provider object (third parties' too) as it is, leaves the provider's own
code as its author tested it, and is one class whose every override can be read here.

``provenance()`` says, per ``Declared`` field, whether the run's value is the provider's or the
file's (with the file's ``source`` link): the conformance report's ``declaredSources``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from lbconform.config import Timeouts
from lbconform.declaration import POLICIES, Declaration, Given, contradiction, load
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.interface import WorkloadRef, expand_addresses, fill
from lbconform.kube.workload import Workload
from lbconform.providers.base import NODE_POOL, POD_POOL, Declared, PoolMember, Provider, ServiceRef
from lbconform.providers.interfaced import declared_workload, read_pool
from lbconform.providers.support import require_api

if TYPE_CHECKING:
    from lbconform.kube.rawapi import RawApi

#: Where a declared value came from, as the report says it.
FROM_PROVIDER: Final = "provider"
FROM_DECLARATION: Final = "declaration"


def _merged(base: Declared, given: Mapping[str, Given]) -> Declared:
    changes: dict[str, Any] = {name: dict(g.value) if name == "notes" else g.value
                               for name, g in given.items()}
    return dataclasses.replace(base, **changes)


def _origin(given: Given | None) -> dict[str, Any]:
    if given is None:
        return {"from": FROM_PROVIDER}
    return {"from": FROM_DECLARATION, **({"source": given.source} if given.source else {})}


class DeclaredProvider(Provider):
    """``inner`` with the claims of ``declaration`` over its own (see the module's docstring).

    Checked when made: the file's ``perMode`` names modes of the provider, and the values the
    run will use, the file's and the provider's together, do not contradict each other (a
    UsageError naming the file's field otherwise)."""

    def __init__(self, inner: Provider, declaration: Declaration) -> None:
        self.inner, self.declaration = inner, declaration
        self.name, self.modes = inner.name, inner.modes
        self._check()

    def __getattr__(self, name: str) -> Any:
        # Only what Provider does not define reaches here: the provider's attributes of its own.
        if name in ("inner", "declaration"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _check(self) -> None:
        file = self.declaration.file
        unknown = [m for m in self.declaration.per_mode if m not in self.inner.modes]
        if unknown:
            raise UsageError(f"{file}: perMode.{unknown[0]}: the {self.name} provider has modes "
                             f"{', '.join(self.inner.modes)}")
        for policy in (None, *POLICIES):
            declared = self.declared() if policy is None else self.declared_for(policy)
            given = self._given(policy)
            found = contradiction({f.name: getattr(declared, f.name) for f in dataclasses.fields(declared)},
                                  {name: g.path for name, g in given.items()}, self.name)
            if found is not None:
                raise UsageError(f"{file}: {found[0]}: {found[1]}")

    def _given(self, policy: str | None) -> dict[str, Given]:
        return self.declaration.given(self.inner.mode or None, policy)

    # --- what the declaration overrides --------------------------------------------------------------
    def features(self) -> set[Feature]:
        if self.declaration.features is None:
            return self.inner.features()
        return set(self.declaration.features)

    def declared(self) -> Declared:
        return _merged(self.inner.declared(), self._given(None))

    def declared_for(self, external_traffic_policy: str) -> Declared:
        return _merged(self.inner.declared_for(external_traffic_policy), self._given(external_traffic_policy))

    def timeouts(self) -> Timeouts:
        return dataclasses.replace(self.inner.timeouts(), **self.declaration.timeouts)

    def ip_mode(self, service: ServiceRef) -> str:
        """The file's ipMode where it changes the provider's declared one; where it repeats it, the
        provider's answer for the Service stands (the lab's depends on the Service's backend mode)."""
        given = self._given(None).get("ip_mode")
        if given is not None and given.value != self.inner.declared().ip_mode:
            return str(given.value)
        return self.inner.ip_mode(service)

    def provenance(self) -> dict[str, dict[str, Any]]:
        """Per ``Declared`` field (as the report's ``declared`` names it): ``from`` provider or
        declaration, the file's ``source`` where it gives one, and the values the file gives for
        one policy (``perPolicy``)."""
        given = self._given(None)
        out = {}
        for f in dataclasses.fields(Declared):
            entry = _origin(given.get(f.name))
            per_policy = {}
            for policy in POLICIES:
                override = self.declaration.per_policy.get(policy, {}).get(f.name)
                if override is not None:
                    value = getattr(self.declared_for(policy), f.name)
                    per_policy[policy] = {"value": value, **_origin(override)}
            if per_policy:
                entry["perPolicy"] = per_policy
            out[f.name] = entry
        return out

    # --- everything else is the provider's -----------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.inner.mode

    @mode.setter
    def mode(self, value: str) -> None:
        self.inner.mode = value

    @property
    def api(self) -> RawApi | None:
        return self.inner.api

    @api.setter
    def api(self, value: RawApi | None) -> None:
        self.inner.api = value

    @property
    def options(self) -> Mapping[str, str]:
        return self.inner.options

    @options.setter
    def options(self, value: Mapping[str, str]) -> None:
        self.inner.options = value

    def configure(self, api: RawApi | None, options: Mapping[str, str]) -> None:
        self.inner.configure(api, options)

    def option(self, name: str, *env: str, default: str = "") -> str:
        return self.inner.option(name, *env, default=default)

    def check_target(self, kubeconfig_given: bool) -> None:
        self.inner.check_target(kubeconfig_given)

    def set_mode(self, mode: str) -> None:
        self.inner.set_mode(mode)
        self._check()

    # --- what the declaration's interface answers, where it gives one ------------------------------
    def service_annotations(self) -> dict[str, str]:
        given = self.declaration.interface.service_annotations
        return dict(given) if given is not None else self.inner.service_annotations()

    def idle_timeout_to_ask(self) -> int:
        seconds = self.declaration.interface.idle_timeout_seconds
        return seconds if seconds is not None else self.inner.idle_timeout_to_ask()

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        given = self.declaration.interface.idle_timeout_annotations
        if given is None:
            return self.inner.idle_timeout_annotations(seconds)
        return fill(given, seconds=str(seconds))

    def idle_reset_annotations(self, reset: bool) -> dict[str, str]:
        given = self.declaration.interface.idle_reset_annotations
        if given is None:
            return self.inner.idle_reset_annotations(reset)
        return fill(given, reset="true" if reset else "false")

    def needs_node_ports(self) -> bool:
        given = self.declaration.interface.needs_node_ports
        return given if given is not None else self.inner.needs_node_ports()

    def pod_pool_annotations(self) -> dict[str, str]:
        given = self.declaration.interface.pod_pool_annotations
        return dict(given) if given is not None else self.inner.pod_pool_annotations()

    def requestable_addresses(self) -> list[str]:
        given = self.declaration.interface.requestable_addresses
        return expand_addresses(given) if given is not None else self.inner.requestable_addresses()

    def address_request(self, address: str) -> dict[str, str]:
        given = self.declaration.interface.address_annotations
        return fill(given, address=address) if given is not None else self.inner.address_request(address)

    def pool_kind(self, service: ServiceRef) -> str:
        """Where the file says how a Service asks for a pod pool: a pod pool for a Service that
        carries those annotations (the run's own included), a node pool otherwise."""
        asks = self.declaration.interface.pod_pool_annotations
        if asks is None:
            return self.inner.pool_kind(service)
        api = require_api(self.api, self.name, "the Service's annotations")
        svc = api.get(f"/api/v1/namespaces/{service.namespace}/services/{service.name}")
        annotations = svc.get("metadata", {}).get("annotations") or {}
        return POD_POOL if all(annotations.get(k) == v for k, v in asks.items()) else NODE_POOL

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        source = self.declaration.interface.backend_pool
        if source is None:
            return self.inner.backend_pool(service)
        return read_pool(require_api(self.api, self.name, "the objects that show the pool"), source, service)

    def restart_load_balancer(self) -> None:
        ref = self.declaration.interface.controller
        if ref is None:
            self.inner.restart_load_balancer()
            return
        self._workload(ref).roll(self.timeouts().rollout)

    def node_agents(self) -> str:
        ref = self.declaration.interface.node_agents
        if ref is None:
            return self.inner.node_agents()
        return ref.description or f"the {ref.kind} {ref.namespace}/{ref.name}"

    def restart_node_agents(self) -> None:
        ref = self.declaration.interface.node_agents
        if ref is None:
            self.inner.restart_node_agents()
            return
        self._workload(ref).roll(self.timeouts().rollout)

    def _workload(self, ref: WorkloadRef) -> Workload:
        return declared_workload(require_api(self.api, self.name, f"the {ref.kind} {ref.name}"), ref)

    # --- node power is the provider's ----------------------------------------------------------------
    def kill_node(self, name: str) -> None:
        self.inner.kill_node(name)

    def start_node(self, name: str) -> None:
        self.inner.start_node(name)

    def restart_kube_proxy(self, node: str) -> None:
        self.inner.restart_kube_proxy(node)


def apply_declaration(provider: Provider, path: str | Path) -> DeclaredProvider:
    """``provider`` with the declaration in the file ``path`` over its claims; a UsageError of one
    line for a file that cannot be read, is not a valid declaration, or contradicts the provider."""
    return DeclaredProvider(provider, load(path))


def provenance_of(provider: Provider) -> dict[str, dict[str, Any]]:
    """Where each of ``provider``'s declared values came from (all the provider's, unwrapped)."""
    if isinstance(provider, DeclaredProvider):
        return provider.provenance()
    return {f.name: {"from": FROM_PROVIDER} for f in dataclasses.fields(Declared)}


def implementation_of(provider: Provider) -> Mapping[str, str]:
    """The report's implementation fields a declaration file gives (organization, project, ...)."""
    return provider.declaration.implementation if isinstance(provider, DeclaredProvider) else {}

