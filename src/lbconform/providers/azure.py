"""The provider of Azure Load Balancer as cloud-provider-azure (AKS) configures it.

Node mode (the default): every LoadBalancer Service becomes load-balancing rules named
``<prefix>-<PROTOCOL>-<port>`` (``<prefix>-<subnet>-...`` for internal ones) on the
cluster's shared load balancer (``kubernetes``, or ``kubernetes-internal``), where
``<prefix>`` is ``"a" + the Service UID without dashes``, cut to 32 characters
(``cloudprovider.DefaultLoadBalancerName``). The rules' backend pool holds the nodes, either
as IP addresses (``nodeIP`` pools) or as references to NIC IP configurations (the default,
``nodeIPConfiguration``). The pool is read with ``load_balancer_backend_address_pools.get``;
the health of each backend, per rule, with ``load_balancer_load_balancing_rules.begin_health``
(the Load Balancer health API, ``Up``/``Down`` per backend address). A NIC reference becomes
an address through the health report, else the Node whose providerID owns the NIC (scale
set VMs), else the NIC itself.

Pod mode (``--mode pod``): the cluster runs cloud-provider-azure's container-based load
balancing, where a ServiceGateway holds pod IPs grouped by node ("address locations"), each
address listing the Services (by UID) it serves. The pool is
``service_gateways.get_address_locations`` filtered by the Service's UID. That mode is a
property of the whole cluster, not of a Service, so there are no per-Service annotations
for it; in node mode a pod pool is not supported. Pod pools have no probes: the pool is the
ready endpoints, so ``healthy`` is None.

Idle timeout: the idle suites' Services ask for 4 minutes (``azure-load-balancer-tcp-idle-timeout``
takes whole minutes, 4 to 100), and choose the TCP reset at idle timeout (on by default on a
Standard load balancer: RSTs to both ends when a flow's timer fires) with
``azure-load-balancer-disable-tcp-reset``.

Options (``--provider-option NAME=VALUE``), each with an environment fallback:

- ``subscription`` (``AZURE_SUBSCRIPTION_ID``): the subscription of the cluster's resources.
- ``resourceGroup`` (``AZURE_RESOURCE_GROUP``): the group holding the load balancer: on AKS
  the node resource group (``MC_<group>_<cluster>_<region>``).
- ``loadBalancer`` (``AZURE_LOAD_BALANCER_NAME``, default ``kubernetes``): the shared load
  balancer; ``kubernetes-internal`` for internal Services.
- ``serviceGateway`` (``AZURE_SERVICE_GATEWAY``): the ServiceGateway, in pod mode.

Credentials come from ``azure.identity.DefaultAzureCredential`` (environment, workload or
managed identity, ``az login``). The SDK is the ``azure`` extra: ``pip install 'lbconform[azure]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.providers.base import (
    NODE_POOL,
    POD_POOL,
    Declared,
    NotSupported,
    PoolMember,
    Provider,
    ServiceRef,
)
from lbconform.providers.support import NodeIndex, cluster_nodes, import_sdk

NIC_SEGMENT = "/networkinterfaces/"
ANNOTATION = "service.beta.kubernetes.io/azure-load-balancer-"
IDLE_TIMEOUT, DISABLE_TCP_RESET = ANNOTATION + "tcp-idle-timeout", ANNOTATION + "disable-tcp-reset"
#: The idle timeouts cloud-provider-azure takes, in minutes (its default is the shortest).
IDLE_MINUTES_MIN, IDLE_MINUTES_MAX = 4, 100


def _props(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An ARM resource's ``properties`` (the SDK's ``as_dict()`` keeps ARM's nesting)."""
    props = obj.get("properties")
    return props if isinstance(props, Mapping) else obj


def _last_segment(resource_id: str) -> str:
    return resource_id.rstrip("/").rsplit("/", 1)[-1]


def rule_prefix(uid: str) -> str:
    """The name prefix of a Service's load-balancing rules (cloud-provider-azure)."""
    return ("a" + uid.replace("-", ""))[:32].lower()


def service_rules(load_balancer: Mapping[str, Any], uid: str) -> list[str]:
    """Names of the load balancer's rules that belong to the Service with this UID."""
    prefix = rule_prefix(uid)
    return [r["name"] for r in _props(load_balancer).get("loadBalancingRules") or []
            if str(r.get("name", "")).lower().startswith(prefix)]


def rule_pool_names(load_balancer: Mapping[str, Any], rule_names: Iterable[str]) -> list[str]:
    """The backend pools those rules send to, in first-seen order."""
    wanted = {n.lower() for n in rule_names}
    pools: list[str] = []
    for rule in _props(load_balancer).get("loadBalancingRules") or []:
        if str(rule.get("name", "")).lower() not in wanted:
            continue
        props = _props(rule)
        refs = [props.get("backendAddressPool") or {}, *(props.get("backendAddressPools") or [])]
        for ref in refs:
            name = _last_segment(ref.get("id", "")) if ref.get("id") else ""
            if name and name not in pools:
                pools.append(name)
    return pools


def parse_backend_pool(pool: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A backend pool -> (address, NIC IP configuration ID) per backend; one of the two may be ''."""
    props = _props(pool)
    out: list[tuple[str, str]] = []
    for backend in props.get("loadBalancerBackendAddresses") or []:
        bprops = _props(backend)
        nic = (bprops.get("networkInterfaceIPConfiguration") or {}).get("id", "")
        out.append((bprops.get("ipAddress") or "", nic.lower()))
    for ipconfig in props.get("backendIPConfigurations") or []:
        ip = _props(ipconfig).get("privateIPAddress") or ""
        out.append((ip, str(ipconfig.get("id", "")).lower()))
    return out


def parse_rule_health(health: Mapping[str, Any]) -> dict[str, bool]:
    """A rule's health report -> Up (True) / not Up, keyed by address and by NIC IP configuration ID."""
    out: dict[str, bool] = {}
    for backend in health.get("loadBalancerBackendAddresses") or []:
        up = str(backend.get("state", "")).lower() == "up"
        nic = str(backend.get("networkInterfaceIPConfigurationId") or "")
        for key in (backend.get("ipAddress") or "", nic):
            if key:
                out[key.lower()] = up
    return out


def health_addresses(health: Mapping[str, Any]) -> dict[str, str]:
    """NIC IP configuration ID -> address, where a health report names both."""
    return {str(b["networkInterfaceIPConfigurationId"]).lower(): b["ipAddress"]
            for b in health.get("loadBalancerBackendAddresses") or []
            if b.get("networkInterfaceIPConfigurationId") and b.get("ipAddress")}


def nic_owner(ipconfig_id: str) -> str:
    """The resource a NIC IP configuration belongs to: a scale set VM's ID, else the NIC's."""
    lowered = ipconfig_id.lower()
    head, sep, _ = lowered.partition(NIC_SEGMENT)
    if sep and "/virtualmachinescalesets/" in head:
        return head
    return lowered.partition("/ipconfigurations/")[0]


def node_pool(backends: Iterable[tuple[str, str]], reports: Iterable[Mapping[str, bool]],
              nic_addresses: Mapping[str, str], nodes: NodeIndex) -> list[PoolMember]:
    """Pool backends plus per-rule health -> members; healthy only if Up in every rule's report."""
    reports = list(reports)
    members: dict[str, PoolMember] = {}
    for listed, nic in backends:
        address = listed or nic_addresses.get(nic, "") or nodes.ip_by_provider_id.get(nic_owner(nic), "")
        keys = [k for k in (address.lower(), nic) if k]
        verdicts = [next(r[k] for k in keys if k in r) for r in reports if any(k in r for k in keys)]
        healthy = bool(verdicts) and all(verdicts)
        key = address or nic
        name = nodes.name_by_ip.get(address, "") or ("" if address else nic)
        if key in members:
            healthy = healthy and bool(members[key].healthy)
        members[key] = PoolMember(address=address, healthy=healthy, name=name)
    return sorted(members.values(), key=lambda m: (m.address, m.name))


def pod_pool(locations: Iterable[Mapping[str, Any]], uid: str, nodes: NodeIndex) -> list[PoolMember]:
    """ServiceGateway address locations -> the pod IPs registered for the Service with this UID."""
    uid = uid.lower()
    members = []
    for location in locations:
        host = location.get("addressLocation") or ""
        for address in location.get("addresses") or []:
            if uid in {str(s).lower() for s in address.get("services") or []} and address.get("address"):
                members.append(PoolMember(address=address["address"], healthy=None,
                                          name=nodes.name_by_ip.get(host, host)))
    return sorted(members, key=lambda m: m.address)


def as_dict(obj: Any) -> dict[str, Any]:
    """An SDK model in ARM's JSON shape."""
    if hasattr(obj, "as_dict"):
        result: dict[str, Any] = obj.as_dict()
        return result
    return dict(obj)


class AzureProvider(Provider):
    name = "azure"
    modes = ("node", "pod")
    mode = "node"
    options_help: ClassVar[Mapping[str, str]] = {
        "subscription": "subscription ID (env AZURE_SUBSCRIPTION_ID)",
        "resourceGroup": "resource group of the load balancer, on AKS the node resource group "
                         "(env AZURE_RESOURCE_GROUP)",
        "loadBalancer": "the shared load balancer's name (env AZURE_LOAD_BALANCER_NAME, default kubernetes)",
        "serviceGateway": "the ServiceGateway of a cluster in pod mode (env AZURE_SERVICE_GATEWAY)",
    }
    _client: Any = None

    def features(self) -> set[Feature]:
        # LoadBalancerRestart: the cloud-controller-manager runs outside the cluster on AKS.
        return set(Feature) - {Feature.LOAD_BALANCER_RESTART}

    def declared(self) -> Declared:
        return Declared(
            health_check_interval=5.0, healthy_threshold=2, unhealthy_threshold=2, idle_timeout=240.0,
            idle_reset=True,
            notes={"source": "cloud-provider-azure defaults: probe every 5 s, 2 probes (probeThreshold "
                             "counts both ways); idle timeout 4 min (idleTimeoutInMinutes) with TCP reset "
                             "(Standard SKU); Azure Load Balancer health probe documentation",
                   "tcp_reset": "true: bidirectional RSTs when a flow's idle timeout fires (Azure Load "
                                "Balancer TCP reset documentation); a Service turns it off with "
                                "azure-load-balancer-disable-tcp-reset",
                   "pod_mode": "no probes: the pool is the ready endpoints"})

    def timeouts(self) -> Timeouts:
        # ARM operations on the shared load balancer are serialized; a new public IP and rule
        # take one to a few minutes, and pool changes follow Node/EndpointSlice changes slowly.
        return Timeouts(lb_create=420, lb_propagation=240, lb_delete=420, endpoint_lag=180,
                        health_transition=60, rollout=300, namespace_delete=600, request=10)

    def idle_timeout_to_ask(self) -> int:
        """Four minutes, the shortest a Service may ask of cloud-provider-azure (and its default)."""
        return IDLE_MINUTES_MIN * 60

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        """``azure-load-balancer-tcp-idle-timeout`` takes whole minutes, 4 to 100 (the service
        controller's error event otherwise)."""
        minutes, rest = divmod(seconds, 60)
        if rest or not IDLE_MINUTES_MIN <= minutes <= IDLE_MINUTES_MAX:
            raise ValueError(f"an Azure idle timeout is whole minutes from {IDLE_MINUTES_MIN} to "
                             f"{IDLE_MINUTES_MAX}, not {seconds}s")
        return {IDLE_TIMEOUT: str(minutes)}

    def idle_reset_annotations(self, reset: bool) -> dict[str, str]:
        """``azure-load-balancer-disable-tcp-reset`` (cloud-provider-azure v1.27.10, v1.28.2 and from
        v1.29; older ones always reset on a Standard load balancer)."""
        return {DISABLE_TCP_RESET: "false" if reset else "true"}

    def pod_pool_annotations(self) -> dict[str, str]:
        if self.mode != "pod":
            raise NotSupported("Azure pod pools (container-based load balancing with a ServiceGateway) "
                               "are a cluster-wide cloud-provider-azure setting, not a Service "
                               "annotation: run against such a cluster with --mode pod")
        return {}

    def pool_kind(self, service: ServiceRef) -> str:
        return POD_POOL if self.mode == "pod" else NODE_POOL

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        client = self.client()
        if not service.uid:
            raise UsageError(f"the azure provider finds a Service's pool by its UID: "
                             f"{service.namespace}/{service.name} has none")
        group = self._required("resourceGroup", "AZURE_RESOURCE_GROUP")
        nodes = cluster_nodes(self.api)
        if self.mode == "pod":
            gateway = self._required("serviceGateway", "AZURE_SERVICE_GATEWAY")
            locations = [as_dict(x) for x in client.service_gateways.get_address_locations(group, gateway)]
            return pod_pool(locations, service.uid, nodes)
        lb_name = self.option("loadBalancer", "AZURE_LOAD_BALANCER_NAME", default="kubernetes")
        load_balancer = as_dict(client.load_balancers.get(group, lb_name))
        rules = service_rules(load_balancer, service.uid)
        if not rules:
            return []
        reports, nic_addresses = [], {}
        for rule in rules:
            poller = client.load_balancer_load_balancing_rules.begin_health(group, lb_name, rule)
            health = as_dict(poller.result())
            reports.append(parse_rule_health(health))
            nic_addresses.update(health_addresses(health))
        backends: list[tuple[str, str]] = []
        for pool in rule_pool_names(load_balancer, rules):
            backends += parse_backend_pool(as_dict(
                client.load_balancer_backend_address_pools.get(group, lb_name, pool)))
        nic_addresses.update(self._nic_addresses(client, backends, nic_addresses, nodes))
        return node_pool(backends, reports, nic_addresses, nodes)

    def _nic_addresses(self, client: Any, backends: list[tuple[str, str]], known: Mapping[str, str],
                       nodes: NodeIndex) -> dict[str, str]:
        """Private addresses of the NICs that neither the health reports nor the Nodes resolve."""
        out: dict[str, str] = {}
        for address, nic in backends:
            if address or not nic or nic in known or nic_owner(nic) in nodes.ip_by_provider_id:
                continue
            parts = nic.split("/")
            try:
                group = parts[parts.index("resourcegroups") + 1]
                nic_name = parts[parts.index("networkinterfaces") + 1]
                if "virtualmachinescalesets" in parts:
                    vmss = parts[parts.index("virtualmachinescalesets") + 1]
                    index = parts[parts.index("virtualmachines") + 1]
                    found = client.network_interfaces.get_virtual_machine_scale_set_network_interface(
                        group, vmss, index, nic_name)
                else:
                    found = client.network_interfaces.get(group, nic_name)
            except ValueError:
                continue
            for ipconfig in _props(as_dict(found)).get("ipConfigurations") or []:
                ip = _props(ipconfig).get("privateIPAddress")
                if ip:
                    out[str(ipconfig.get("id", "")).lower()] = ip
        return out

    def client(self) -> Any:
        """The NetworkManagementClient, made once (imports the SDK on first use)."""
        network = import_sdk(self.name, "azure.mgmt.network")
        identity = import_sdk(self.name, "azure.identity")
        if self._client is None:
            subscription = self._required("subscription", "AZURE_SUBSCRIPTION_ID")
            self._client = network.NetworkManagementClient(identity.DefaultAzureCredential(), subscription)
        return self._client

    def _required(self, option: str, env: str) -> str:
        value = self.option(option, env)
        if not value:
            raise UsageError(f"the azure provider needs --provider-option {option}=... (or {env})")
        return value
