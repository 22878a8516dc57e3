from __future__ import annotations

import hashlib
import io
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from lbconform import providers
from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.idle import CannotObserve, plan_idle_check
from lbconform.kube.rawapi import ApiError
from lbconform.providers import aws, azure, gke, kind, kubevip, metallb
from lbconform.providers.base import NotSupported, PoolMember, Provider, ServiceRef
from lbconform.providers.support import node_index
from lbconform.termination import ENDPOINT_PROPAGATION_SECONDS, INTERVALS_OF_ROOM, Ordering


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
    installed = "aws, azure, generic, gke, kind, kube-vip, lab, metallb"
    with pytest.raises(UsageError, match=rf"no provider named 'aks'.*{installed}"):
        providers.load("aks")


# --- every provider --------------------------------------------------------------------------

NEW_PROVIDERS = ("kind", "metallb", "kube-vip", "azure", "gke", "aws")
SDKS = {"azure": "azure.mgmt.network", "gke": "google.cloud.compute_v1", "aws": "boto3"}


class FakeApi:
    """RawApi's ``get`` over canned answers; a path without one is a 404."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers
        self.paths: list[str] = []

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        self.paths.append(path)
        if path not in self.answers:
            raise ApiError(404, "NotFound", f"{path} not found")
        return self.answers[path]


def node(name: str, ip: str, provider_id: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"providerID": provider_id} if provider_id else {},
            "status": {"addresses": [{"type": "Hostname", "address": name},
                                     {"type": "InternalIP", "address": ip}]}}


def configured(name: str, api: Any = None, **options: str) -> Any:
    provider = providers.load(name)
    provider.configure(api, options)
    return provider


@pytest.mark.parametrize("name", sorted(providers.available()))
def test_every_provider_loads_and_declares_sane_values(name: str) -> None:
    provider = providers.load(name)
    assert isinstance(provider, Provider) and provider.name == name
    feats = provider.features()
    assert feats and all(isinstance(f, Feature) for f in feats) and feats <= set(Feature)
    for declared in (provider.declared(), provider.declared_for("Cluster"), provider.declared_for("Local")):
        assert declared.notes.get("source")
        if declared.health_checks:
            assert declared.health_check_interval > 0
            assert declared.healthy_threshold >= 1 and declared.unhealthy_threshold >= 1
        else:
            assert declared.time_to_unhealthy == 0
        assert declared.idle_timeout is None or declared.idle_timeout > 0
    for timeout, value, maximum, _ in provider.timeouts().describe():
        assert 0 < value <= maximum, timeout
    if name in NEW_PROVIDERS:  # the lab's mode is '' until --mode: the lab's own default applies
        assert provider.mode in provider.modes


def test_the_new_providers_are_installed() -> None:
    assert set(NEW_PROVIDERS) <= set(providers.available())


def test_an_unknown_provider_option_lists_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"--provider-option projekt: the gke provider knows the options "
                                         r"project, region"):
        configured("gke", projekt="p")
    with pytest.raises(UsageError, match="knows the options none"):
        configured("generic", anything="x")


def test_options_fall_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "from-env")
    gke = configured("gke")
    assert gke.option("project", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT") == "from-env"
    gke.configure(None, {"project": "from-option"})
    assert gke.option("project", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT") == "from-option"
    assert gke.option("region", "NOT_SET_ANYWHERE", default="d") == "d"


@pytest.mark.parametrize("name", sorted(SDKS))
def test_a_missing_sdk_is_one_line_naming_the_extra(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, SDKS[name], None)  # makes the import fail, installed or not
    provider = configured(name)
    with pytest.raises(UsageError) as info:
        provider.backend_pool(ServiceRef("ns", "svc", uid="0a1b", ingress="lb.example"))
    assert str(info.value) == f"the {name} provider needs its SDK: pip install 'lbconform[{name}]'"


def test_providers_without_an_own_idea_of_pod_pools_say_so() -> None:
    for name in ("kind", "metallb", "kube-vip", "gke"):
        with pytest.raises(NotSupported):
            providers.load(name).pod_pool_annotations()
        assert Feature.POD_BACKEND_POOL not in providers.load(name).features()


# --- kind ------------------------------------------------------------------------------------

def envoy_host(address: str, port: int, **health: Any) -> dict[str, Any]:
    return {"address": {"socket_address": {"address": address, "port_value": port}},
            "stats": [{"name": "cx_connect_fail"}, {"value": "12", "name": "cx_total"},
                      {"type": "GAUGE", "name": "cx_active"}],
            "health_status": {"eds_health_status": "HEALTHY", **health},
            "weight": 1, "locality": {}}


# The shape of Envoy's /clusters?format=json (envoy.admin.v3.Clusters) for a Service with a TCP
# and a UDP port on three kind nodes: proto3 JSON leaves false flags out.
ENVOY_CLUSTERS = {"cluster_statuses": [
    {"name": "cluster_IPv4_80_TCP", "added_via_api": True,
     "host_statuses": [envoy_host("172.18.0.3", 31372),
                       envoy_host("172.18.0.4", 31372, failed_active_health_check=True),
                       envoy_host("172.18.0.5", 31372, failed_active_health_check=True,
                                  pending_active_hc=True)],
     "circuit_breakers": {"thresholds": [{"max_connections": 1024, "max_pending_requests": 1024,
                                          "max_requests": 1024, "max_retries": 3}]},
     "observability_name": "cluster_IPv4_80_TCP"},
    {"name": "cluster_IPv4_53_UDP", "added_via_api": True,
     "host_statuses": [envoy_host("172.18.0.3", 30053), envoy_host("172.18.0.4", 30053),
                       envoy_host("172.18.0.5", 30053, eds_health_status="UNHEALTHY")]},
]}


def test_kind_pool_is_the_nodes_envoy_balances_to() -> None:
    names = {"172.18.0.3": "kind-worker", "172.18.0.4": "kind-worker2"}
    assert kind.parse_envoy_clusters(ENVOY_CLUSTERS, names) == [
        PoolMember("172.18.0.3", True, "kind-worker"),
        PoolMember("172.18.0.4", False, "kind-worker2"),  # unhealthy in one of its clusters
        PoolMember("172.18.0.5", False, ""),
    ]
    assert kind.parse_envoy_clusters({}) == []


def test_kind_host_health_flags() -> None:
    assert kind.host_healthy({"eds_health_status": "HEALTHY"})
    assert kind.host_healthy({})
    assert not kind.host_healthy({"failed_outlier_check": True, "eds_health_status": "HEALTHY"})
    assert not kind.host_healthy({"active_hc_timeout": True})
    assert not kind.host_healthy({"eds_health_status": "DRAINING"})


def test_kind_finds_its_envoy_container_and_admin_port() -> None:
    digest = hashlib.sha256(b"kind/ns/svc").hexdigest()[:12]
    assert kind.container_name("kind", "ns", "svc") == f"kindccm-{digest}"
    assert kind.container_name("other", "ns", "svc") != kind.container_name("kind", "ns", "svc")
    ports = {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "32770"}],
             "10000/tcp": [{"HostIp": "::", "HostPort": "32771"}, {"HostIp": "0.0.0.0", "HostPort": "32771"}]}
    assert kind.published_admin(ports) == ("127.0.0.1", 32771)
    with pytest.raises(UsageError, match="no host port for 10000/tcp"):
        kind.published_admin({"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "32770"}]})


def test_kind_reads_the_admin_api_where_the_options_say(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = ServiceRef("ns", "svc", ingress="172.18.0.9")
    assert configured("kind", admin="ingress").admin_address(svc) == ("172.18.0.9", 10000)
    assert configured("kind", admin="[::1]:9901").admin_address(svc) == ("::1", 9901)
    with pytest.raises(UsageError, match="has no ingress address yet"):
        configured("kind", admin="ingress").admin_address(ServiceRef("ns", "svc"))
    with pytest.raises(UsageError, match="use ingress, portmap or HOST:PORT"):
        configured("kind", admin="somewhere").admin_address(svc)

    urls = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        urls.append(url)
        return io.BytesIO(json.dumps(ENVOY_CLUSTERS).encode())

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    api = FakeApi({"/api/v1/nodes": {"items": [node("kind-worker", "172.18.0.3")]}})
    pool = configured("kind", api, admin="ingress").backend_pool(svc)
    assert urls == ["http://172.18.0.9:10000/clusters?format=json"]
    assert pool[0] == PoolMember("172.18.0.3", True, "kind-worker")


# --- metallb ---------------------------------------------------------------------------------

def l2_status(node_name: str, namespace: str, name: str, kind_: str = "l2") -> dict[str, Any]:
    return {"apiVersion": "metallb.io/v1beta1",
            "kind": "ServiceL2Status" if kind_ == "l2" else "ServiceBGPStatus",
            "metadata": {"name": f"{kind_}-x7k2p", "namespace": "metallb-system",
                         "labels": {"metallb.io/node": node_name, "metallb.io/service-name": name,
                                    "metallb.io/service-namespace": namespace}},
            "spec": {},
            "status": {"node": node_name, "serviceName": name, "serviceNamespace": namespace,
                       **({"interfaces": [{"name": "eth0"}]} if kind_ == "l2" else {"peers": ["tor"]})}}


METALLB_NODES = {"items": [node("worker-1", "10.0.0.11"), node("worker-2", "10.0.0.12")]}


def test_metallb_pool_is_the_announcing_node_without_health() -> None:
    statuses = [l2_status("worker-2", "ns", "svc"), l2_status("worker-1", "ns", "other"),
                l2_status("worker-1", "other-ns", "svc")]
    assert metallb.pool_from_statuses(statuses, "ns", "svc", {"worker-2": "10.0.0.12"}) == [
        PoolMember("10.0.0.12", None, "worker-2")]
    bgp = [l2_status("worker-1", "ns", "svc", "bgp"), l2_status("worker-2", "ns", "svc", "bgp")]
    assert metallb.announcing_nodes(bgp, "ns", "svc") == ["worker-1", "worker-2"]


def test_metallb_announcing_node_is_the_status_objects_owner() -> None:
    """An object another speaker took over names its new owner in its label only (metallb#2930)."""
    taken_over = l2_status("worker-2", "ns", "svc")
    taken_over["metadata"]["labels"]["metallb.io/node"] = "worker-1"
    assert metallb.announcing_nodes([taken_over], "ns", "svc") == ["worker-1"]
    unlabelled = l2_status("worker-2", "ns", "svc")
    del unlabelled["metadata"]["labels"]
    assert metallb.announcing_nodes([unlabelled], "ns", "svc") == ["worker-2"]


def test_metallb_reads_status_objects_through_the_cluster_api() -> None:
    base = "/apis/metallb.io/v1beta1/namespaces/metallb-system/"
    api = FakeApi({"/api/v1/nodes": METALLB_NODES,
                   base + "servicel2statuses": {"items": [l2_status("worker-1", "ns", "svc")]}})
    pool = configured("metallb", api).backend_pool(ServiceRef("ns", "svc"))
    assert pool == [PoolMember("10.0.0.11", None, "worker-1")]  # no ServiceBGPStatus CRD: L2 only
    with pytest.raises(NotSupported, match="publishes no ServiceL2Status"):
        configured("metallb", FakeApi({"/api/v1/nodes": METALLB_NODES})).backend_pool(ServiceRef("ns", "svc"))
    with pytest.raises(UsageError, match="must be configured with the target cluster"):
        configured("metallb").backend_pool(ServiceRef("ns", "svc"))
    api = FakeApi({"/api/v1/nodes": METALLB_NODES,
                   "/apis/metallb.io/v1beta1/namespaces/lb/servicebgpstatuses": {"items": []}})
    assert configured("metallb", api, namespace="lb").backend_pool(ServiceRef("ns", "svc")) == []


def test_metallb_declares_no_health_checks_and_no_idle_timeout() -> None:
    provider = providers.load("metallb")
    declared = provider.declared()
    assert not declared.health_checks and declared.idle_timeout is None
    assert {Feature.HEALTH_CHECK_TRANSITIONS, Feature.IDLE_TIMEOUT}.isdisjoint(provider.features())
    assert Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL in provider.features()


def test_only_metallb_declares_that_restarting_its_agents_moves_the_address_and_back() -> None:
    """MetalLB's layer-2 failback (metallb#795) is its declaration, with its source; no other
    provider's restart test excuses established connections."""
    claims = {}
    for name in providers.available():
        provider = providers.load(name)
        claims[name] = {provider.declared_for(p).agent_restart_moves_address for p in ("Cluster", "Local")}
    assert claims.pop("metallb") == {True}
    assert claims and all(c == {False} for c in claims.values()), claims
    assert "metallb#795" in providers.load("metallb").declared().notes["agent restart"]


# --- kube-vip --------------------------------------------------------------------------------

def lease(holder: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kubevip-svc", "namespace": "ns"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


def test_kube_vip_pool_is_the_holder_of_the_services_lease() -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/kubevip-svc"
    api = FakeApi({"/api/v1/nodes": METALLB_NODES, path: lease("worker-2")})
    assert configured("kube-vip", api).backend_pool(ServiceRef("ns", "svc")) == [
        PoolMember("10.0.0.12", None, "worker-2")]
    assert configured("kube-vip", FakeApi({path: lease("")})).backend_pool(ServiceRef("ns", "svc")) == []
    assert configured("kube-vip", FakeApi({})).backend_pool(ServiceRef("ns", "svc")) == []  # no election yet
    api = FakeApi({"/api/v1/nodes": METALLB_NODES,
                   "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lb-svc": lease("worker-1")})
    prefixed = configured("kube-vip", api, **{"lease-prefix": "lb-"})
    assert prefixed.backend_pool(ServiceRef("ns", "svc"))[0].name == "worker-1"


def test_kube_vip_declares_its_lease_failover_and_the_cloud_providers_finalizer() -> None:
    from lbconform.providers.base import ENTRY_ONE_NODE

    provider = providers.load("kube-vip")
    declared = provider.declared()
    assert declared.node_failure_window == kubevip.NODE_FAILOVER_SECONDS == pytest.approx(15 + 2 * 2.2 + 3)
    assert declared.entry == ENTRY_ONE_NODE and declared.cleanup_finalizer and not declared.health_checks
    assert {Feature.HEALTH_CHECK_TRANSITIONS, Feature.IDLE_TIMEOUT}.isdisjoint(provider.features())


def test_announcing_implementations_do_not_claim_hitless_rollouts_behind_a_local_service() -> None:
    from lbconform.providers.base import NotSupported
    from lbconform.termination import Ordering

    provider = providers.load("kube-vip")
    local = provider.declared_for("Local")
    assert local.local_move_gap == kubevip.LOCAL_MOVE_SECONDS == pytest.approx(2 * 2.2 + 3)
    assert provider.declared_for("Cluster").local_move_gap == 0
    with pytest.raises(NotSupported, match=r"no node for up to 7.4 s \(the holder releases the Lease"):
        Ordering.for_rollout(provider, "Local")
    assert Ordering.for_rollout(provider, "Cluster") == cluster_ordering(provider)
    metallb = providers.load("metallb")  # its next node announces on the endpoint event itself,
    # and yet the connections under way through the old node at the move are reset there
    with pytest.raises(NotSupported, match="one announcing node takes all of a Service's traffic"):
        Ordering.for_rollout(metallb, "Local")
    assert Ordering.for_rollout(metallb, "Cluster") == cluster_ordering(metallb)
    lab = providers.load("lab")  # every node with a ready endpoint takes new connections
    assert Ordering.for_rollout(lab, "Local") == Ordering.correct(lab.declared_for("Local"))


def cluster_ordering(provider: Provider) -> Ordering:
    declared = provider.declared_for("Cluster")
    return Ordering.correct(declared, u=max(declared.time_to_unhealthy, ENDPOINT_PROPAGATION_SECONDS))


@pytest.mark.parametrize("name", ["lab", "metallb", "kube-vip", "generic"])
def test_a_cluster_policy_rollout_leaves_the_cluster_time_to_take_the_pod_out_everywhere(name: str) -> None:
    """Under policy Cluster the LB keeps sending to every node and each node's kube-proxy forwards
    to the pod until it has removed it: the preStop outlasts the cluster's endpoint propagation, with
    the room a correct ordering leaves, whatever the LB's own time to unhealthy."""
    provider = providers.load(name)
    order = Ordering.for_rollout(provider, "Cluster")
    interval = provider.declared_for("Cluster").health_check_interval
    assert order.u >= ENDPOINT_PROPAGATION_SECONDS
    assert order.p is not None and order.p >= ENDPOINT_PROPAGATION_SECONDS + INTERVALS_OF_ROOM * interval
    assert order.g > order.p and not order.broken()


# --- azure -----------------------------------------------------------------------------------

UID = "6f2a3b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
SUB = "/subscriptions/0000/resourceGroups/MC_rg_aks_westeurope/providers"
VMSS = f"{SUB}/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-123-vmss/virtualMachines"
LB = f"{SUB}/Microsoft.Network/loadBalancers/kubernetes"


def ipconfig(index: int) -> str:
    return f"{VMSS}/{index}/networkInterfaces/aks-nodepool1-123-vmss/ipConfigurations/ipconfig1"


AZURE_LB = {"name": "kubernetes", "id": LB, "properties": {"loadBalancingRules": [
    {"name": f"a{UID.replace('-', '')}"[:32] + "-TCP-80", "id": f"{LB}/loadBalancingRules/x",
     "properties": {"backendAddressPool": {"id": f"{LB}/backendAddressPools/kubernetes"},
                    "frontendPort": 80, "backendPort": 80, "idleTimeoutInMinutes": 4,
                    "enableTcpReset": True}},
    {"name": f"a{UID.replace('-', '')}"[:32] + "-UDP-53",
     "properties": {"backendAddressPools": [{"id": f"{LB}/backendAddressPools/kubernetes"}]}},
    {"name": "a0123456789abcdef0123456789abcde-TCP-443",
     "properties": {"backendAddressPool": {"id": f"{LB}/backendAddressPools/other"}}},
]}}


def test_azure_finds_the_rules_and_pool_of_a_service() -> None:
    assert azure.rule_prefix(UID) == "a6f2a3b4c5d6e4f708a9b0c1d2e3f4a5"
    rules = azure.service_rules(AZURE_LB, UID)
    assert [r.rsplit("-", 2)[1:] for r in rules] == [["TCP", "80"], ["UDP", "53"]]
    assert azure.rule_pool_names(AZURE_LB, rules) == ["kubernetes"]


def test_azure_node_pool_from_nic_and_ip_backends_with_rule_health() -> None:
    nic_pool = {"name": "kubernetes", "properties": {"backendIPConfigurations": [
        {"id": ipconfig(0)}, {"id": ipconfig(1)}, {"id": ipconfig(2)}]}}
    ip_pool = {"name": "kubernetes", "properties": {"loadBalancerBackendAddresses": [
        {"name": "node-a", "properties": {"ipAddress": "10.224.0.4"}}]}}
    assert azure.parse_backend_pool(ip_pool) == [("10.224.0.4", "")]
    backends = azure.parse_backend_pool(nic_pool)
    assert backends[0] == ("", ipconfig(0).lower())
    tcp = {"up": 1, "down": 1, "loadBalancerBackendAddresses": [
        {"ipAddress": "10.224.0.4", "networkInterfaceIPConfigurationId": ipconfig(0), "state": "Up"},
        {"ipAddress": "10.224.0.5", "networkInterfaceIPConfigurationId": ipconfig(1), "state": "Down",
         "reason": "Probe failed"}]}
    udp = {"loadBalancerBackendAddresses": [
        {"networkInterfaceIPConfigurationId": ipconfig(0), "state": "Up"},
        {"networkInterfaceIPConfigurationId": ipconfig(2), "state": "Up"}]}
    nodes = node_index({"items": [
        node("aks-nodepool1-123-vmss000000", "10.224.0.4", f"azure://{VMSS}/0"),
        node("aks-nodepool1-123-vmss000001", "10.224.0.5", f"azure://{VMSS}/1"),
        node("aks-nodepool1-123-vmss000002", "10.224.0.6", f"azure://{VMSS}/2")]})
    pool = azure.node_pool(backends, [azure.parse_rule_health(tcp), azure.parse_rule_health(udp)],
                           azure.health_addresses(tcp), nodes)
    assert pool == [PoolMember("10.224.0.4", True, "aks-nodepool1-123-vmss000000"),
                    PoolMember("10.224.0.5", False, "aks-nodepool1-123-vmss000001"),
                    # resolved through its Node's providerID; healthy where reported
                    PoolMember("10.224.0.6", True, "aks-nodepool1-123-vmss000002")]


def test_azure_pod_pool_is_the_service_gateway_addresses_of_the_service() -> None:
    locations = [
        {"addressLocation": "10.224.0.4", "addresses": [
            {"address": "10.244.0.12", "services": [UID.upper()]},
            {"address": "10.244.0.13", "services": ["another-uid"]}]},
        {"addressLocation": "10.224.0.5", "addresses": [{"address": "10.244.1.7", "services": [UID, "x"]}]},
    ]
    nodes = node_index({"items": [node("n0", "10.224.0.4")]})
    assert azure.pod_pool(locations, UID, nodes) == [PoolMember("10.244.0.12", None, "n0"),
                                                     PoolMember("10.244.1.7", None, "10.224.0.5")]


class Result:
    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value

    def result(self) -> dict[str, Any]:
        return self.value


def test_azure_backend_pool_through_the_sdk_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []

    def op(name: str, value: Any) -> Any:
        def call(*args: str) -> Any:
            calls.append((name, args))
            return value
        return call

    health = {"loadBalancerBackendAddresses": [{"ipAddress": "10.224.0.4", "state": "Up"}]}
    client = SimpleNamespace(
        load_balancers=SimpleNamespace(get=op("lb", AZURE_LB)),
        load_balancer_load_balancing_rules=SimpleNamespace(begin_health=op("health", Result(health))),
        load_balancer_backend_address_pools=SimpleNamespace(get=op("pool", {"properties": {
            "loadBalancerBackendAddresses": [{"properties": {"ipAddress": "10.224.0.4"}}]}})),
        service_gateways=SimpleNamespace(get_address_locations=op("sgw", [
            {"addressLocation": "10.224.0.4", "addresses": [{"address": "10.244.0.9", "services": [UID]}]}])))
    monkeypatch.setattr(azure, "import_sdk", lambda extra, module: SimpleNamespace())
    provider = configured("azure", resourceGroup="MC_rg", subscription="0000")
    provider._client = client
    svc = ServiceRef("ns", "svc", uid=UID)
    assert provider.backend_pool(svc) == [PoolMember("10.224.0.4", True, "")]
    assert [c[0] for c in calls] == ["lb", "health", "health", "pool"]
    assert calls[2][1] == ("MC_rg", "kubernetes", f"a{UID.replace('-', '')}"[:32] + "-UDP-53")
    with pytest.raises(NotSupported, match="cluster-wide"):
        provider.pod_pool_annotations()
    provider.set_mode("pod")
    with pytest.raises(UsageError, match="serviceGateway"):
        provider.backend_pool(svc)
    provider.configure(None, {"resourceGroup": "MC_rg", "serviceGateway": "sgw"})
    assert provider.backend_pool(svc) == [PoolMember("10.244.0.9", None, "10.224.0.4")]
    assert provider.pod_pool_annotations() == {} and provider.pool_kind(svc) == "pod"


def test_azure_needs_its_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    monkeypatch.setattr(azure, "import_sdk", lambda extra, module: SimpleNamespace())
    with pytest.raises(UsageError, match=r"option subscription=\.\.\. \(or AZURE_SUBSCRIPTION_ID\)"):
        configured("azure").backend_pool(ServiceRef("ns", "svc", uid=UID))


# --- gke -------------------------------------------------------------------------------------

GKE_ZONE = "https://www.googleapis.com/compute/v1/projects/p/zones/europe-west1-b"


def test_gke_declares_local_and_cluster_health_checks_apart() -> None:
    gke_ = providers.load("gke")
    assert gke_.declared() == gke_.declared_for("Local")
    assert gke_.declared_for("Local").time_to_unhealthy == 6.0
    assert gke_.declared_for("Cluster").time_to_unhealthy == 24.0
    assert gke_.service_annotations() == {"cloud.google.com/l4-rbs": "enabled"}


def test_gke_pool_from_group_health() -> None:
    neg_b = {"health_status": [
        {"health_state": "HEALTHY", "instance": f"{GKE_ZONE}/instances/gke-c-pool-1-abcd",
         "ip_address": "10.132.0.5",
         "port": 80, "forwarding_rule_ip": "34.76.1.2"},
        {"health_state": "UNHEALTHY", "instance": f"{GKE_ZONE}/instances/gke-c-pool-1-efgh",
         "ip_address": "10.132.0.6"}], "kind": "compute#backendServiceGroupHealth"}
    neg_c = {"health_status": [{"health_state": "HEALTHY", "instance": "gke-c-pool-1-ijkl",
                                "ip_address": "10.132.0.7"}]}
    assert gke.parse_group_health([neg_b, neg_c, {}]) == [
        PoolMember("10.132.0.5", True, "gke-c-pool-1-abcd"),
        PoolMember("10.132.0.6", False, "gke-c-pool-1-efgh"),
        PoolMember("10.132.0.7", True, "gke-c-pool-1-ijkl")]
    rules = [{"name": "a1", "IP_address": "34.76.1.2"},
             {"name": "a2", "backend_service": "https://x/regions/europe-west1/backendServices/k8s2-abc"}]
    assert gke.backend_service_from_rules(rules) == "k8s2-abc"
    neg = f"{GKE_ZONE}/networkEndpointGroups/k8s2-neg"
    assert gke.backend_groups({"backends": [{"group": neg}, {}]}) == [neg]


def test_gke_backend_pool_through_the_sdk_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    class BackendServices:
        def get(self, **kw: Any) -> dict[str, Any]:
            seen.append(kw)
            return {"backends": [{"group": f"{GKE_ZONE}/networkEndpointGroups/neg"}]}

        def get_health(self, **kw: Any) -> dict[str, Any]:
            seen.append(kw)
            return {"health_status": [{"health_state": "HEALTHY", "ip_address": "10.132.0.5",
                                       "instance": "gke-c-pool-1-abcd"}]}

    class ForwardingRules:
        def list(self, request: dict[str, str]) -> list[dict[str, Any]]:
            seen.append(request)
            return [{"name": "a1b2", "backend_service": "https://x/backendServices/k8s2-by-ip"}]

    compute = SimpleNamespace(RegionBackendServicesClient=BackendServices,
                              ForwardingRulesClient=ForwardingRules,
                              ResourceGroupReference=lambda group: {"group": group})
    monkeypatch.setattr(gke, "import_sdk", lambda extra, module: compute)
    api = FakeApi({"/api/v1/namespaces/ns/services/svc": {"metadata": {"annotations": {
                       "service.kubernetes.io/backend-service": "k8s2-abc-ns-svc-xyz"}}},
                   "/api/v1/nodes": {"items": [node("node-a", "10.132.0.5")]}})
    provider = configured("gke", api, project="p", region="europe-west1")
    assert provider.backend_pool(ServiceRef("ns", "svc")) == [PoolMember("10.132.0.5", True, "node-a")]
    assert seen[1] == {"project": "p", "region": "europe-west1", "backend_service": "k8s2-abc-ns-svc-xyz",
                       "resource_group_reference_resource": {
                           "group": f"{GKE_ZONE}/networkEndpointGroups/neg"}}
    seen.clear()  # without the cluster's API: the forwarding rule of the ingress IP names it
    provider = configured("gke", project="p", region="europe-west1")
    assert provider.backend_pool(ServiceRef("ns", "svc", ingress="34.76.1.2")) == [
        PoolMember("10.132.0.5", True, "gke-c-pool-1-abcd")]
    assert seen[0] == {"project": "p", "region": "europe-west1", "filter": 'IPAddress = "34.76.1.2"'}
    assert seen[1]["backend_service"] == "k8s2-by-ip"


# --- aws -------------------------------------------------------------------------------------

NLB_ARN = "arn:aws:elasticloadbalancing:eu-west-1:123:loadbalancer/net/k8s-ns-svc-0a1b2c/0123"
NLB_DNS = "k8s-ns-svc-0a1b2c-0123456789.elb.eu-west-1.amazonaws.com"


def target(target_id: str, state: str, port: int = 31234) -> dict[str, Any]:
    health: dict[str, Any] = {"State": state}
    if state != "healthy":
        health.update(Reason="Target.FailedHealthChecks", Description="Health checks failed")
    return {"Target": {"Id": target_id, "Port": port, "AvailabilityZone": "eu-west-1a"},
            "HealthCheckPort": str(port), "TargetHealth": health}


def test_aws_finds_its_nlb_by_dns_name() -> None:
    pages = [{"LoadBalancers": [{"LoadBalancerArn": "arn:other", "DNSName": "other.elb.amazonaws.com"}]},
             {"LoadBalancers": [{"LoadBalancerArn": NLB_ARN, "DNSName": NLB_DNS, "Type": "network"}]}]
    assert aws.find_load_balancer_arn(pages, NLB_DNS.upper() + ".") == NLB_ARN
    assert aws.find_load_balancer_arn(pages, "missing.example") == ""


def test_aws_instance_and_ip_targets() -> None:
    nodes = node_index({"items": [node("ip-10-0-1-5.ec2.internal", "10.0.1.5",
                                       "aws:///eu-west-1a/i-0aaa"),
                                  node("ip-10-0-2-6.ec2.internal", "10.0.2.6", "aws:///eu-west-1b/i-0bbb")]})
    ips = aws.node_instance_addresses(nodes)
    assert ips == {"i-0aaa": "10.0.1.5", "i-0bbb": "10.0.2.6"}
    ips.update(aws.instance_addresses({"Reservations": [{"Instances": [
        {"InstanceId": "i-0ccc", "PrivateIpAddress": "10.0.3.7", "State": {"Name": "running"}}]}]}))
    tcp = aws.parse_target_health([target("i-0aaa", "healthy"), target("i-0bbb", "unhealthy"),
                                   target("i-0ccc", "initial")], "instance", ips, nodes.name_by_ip)
    udp = aws.parse_target_health([target("i-0aaa", "draining"), target("i-0bbb", "unhealthy")],
                                  "instance", ips, nodes.name_by_ip)
    assert aws.merge_target_groups([tcp, udp]) == [
        PoolMember("10.0.1.5", False, "ip-10-0-1-5.ec2.internal"),  # draining in one target group
        PoolMember("10.0.2.6", False, "ip-10-0-2-6.ec2.internal"),
        PoolMember("10.0.3.7", False, "i-0ccc")]
    pods = aws.parse_target_health([target("192.168.7.10", "healthy", 8080)], "ip", {}, {})
    assert pods == [PoolMember("192.168.7.10", True, "")]


def test_aws_annotations_follow_the_mode() -> None:
    provider = configured("aws")
    assert provider.service_annotations() == {
        "service.beta.kubernetes.io/aws-load-balancer-type": "external",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "instance",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"}
    assert provider.pod_pool_annotations() == {aws.TARGET_TYPE: "ip"}
    assert provider.needs_node_ports()
    provider.set_mode("ip")
    assert not provider.needs_node_ports()
    assert provider.service_annotations()[aws.TARGET_TYPE] == "ip"
    with pytest.raises(UsageError, match="internet-facing or internal"):
        configured("aws", scheme="public").service_annotations()
    api = FakeApi({"/api/v1/namespaces/ns/services/svc": {"metadata": {"annotations": {
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"}}}})
    assert configured("aws", api).pool_kind(ServiceRef("ns", "svc")) == "pod"
    declared = provider.declared()
    assert (declared.time_to_unhealthy, declared.idle_timeout) == (30.0, 350.0)
    assert declared.notes["deregistration_delay"] == "300"


def test_aws_backend_pool_through_the_sdk_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    class Paginator:
        def paginate(self) -> list[dict[str, Any]]:
            return [{"LoadBalancers": [{"LoadBalancerArn": NLB_ARN, "DNSName": NLB_DNS}]}]

    asked: list[Any] = []

    class Client:
        def get_paginator(self, name: str) -> Paginator:
            return Paginator()

        def describe_target_groups(self, LoadBalancerArn: str) -> dict[str, Any]:
            return {"TargetGroups": [{"TargetGroupArn": "tg-80", "TargetType": "instance", "Port": 31234}]}

        def describe_target_health(self, TargetGroupArn: str) -> dict[str, Any]:
            return {"TargetHealthDescriptions": [target("i-0aaa", "healthy"), target("i-0ddd", "healthy")]}

        def describe_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
            asked.append(InstanceIds)
            instance = {"InstanceId": "i-0ddd", "PrivateIpAddress": "10.0.4.8"}
            return {"Reservations": [{"Instances": [instance]}]}

    class Session:
        def __init__(self, region_name: str, profile_name: str | None) -> None:
            assert (region_name, profile_name) == ("eu-west-1", None)

        def client(self, name: str) -> Client:
            return Client()

    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr(aws, "import_sdk", lambda extra, module: SimpleNamespace(Session=Session))
    api = FakeApi({"/api/v1/nodes": {"items": [node("node-a", "10.0.1.5", "aws:///eu-west-1a/i-0aaa")]}})
    provider = configured("aws", api, region="eu-west-1")
    assert provider.backend_pool(ServiceRef("ns", "svc", ingress=NLB_DNS)) == [
        PoolMember("10.0.1.5", True, "node-a"), PoolMember("10.0.4.8", True, "i-0ddd")]
    assert asked == [["i-0ddd"]]  # only what the Nodes could not tell


def test_the_node_failure_window_follows_the_health_checks_unless_declared() -> None:
    from lbconform.providers.base import DETECTION_SLACK_SECONDS, ENTRY_EVERY_NODE, ENTRY_ONE_NODE, Declared

    checked = Declared(health_check_interval=2.0, healthy_threshold=2, unhealthy_threshold=2,
                       idle_timeout=None)
    assert checked.node_failure_window == 2.0 * 2 + 2.0 + DETECTION_SLACK_SECONDS
    assert (checked.entry, checked.cleanup_finalizer) == (ENTRY_EVERY_NODE, True)
    declared = metallb.MetalLBProvider().declared()
    assert declared.node_failure_window == metallb.NODE_FAILOVER_SECONDS == 10.0
    assert declared.entry == ENTRY_ONE_NODE
    assert not declared.cleanup_finalizer and not declared.health_checks


@pytest.mark.parametrize("name", ["metallb", "kube-vip"])
def test_lab_hosted_providers_kill_nodes_only_in_the_lab(name: str, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Any) -> None:
    monkeypatch.setenv("LBCONFORM_LAB_DIR", str(tmp_path / "no-lab"))
    provider = configured(name)
    for action in (provider.kill_node, provider.start_node, provider.restart_kube_proxy):
        with pytest.raises(NotSupported, match="outside a local cluster"):
            action("node-1")


# --- idle timeouts: what the idle suites' Services ask for, and the reset they get ------------


def test_every_declared_idle_timeout_is_checked_with_a_plan_the_default_budget_holds() -> None:
    """No provider's idle timeout is left unchecked for the backends' sake (the quiet backend sends
    nothing on an idle connection); only kind's hour is beyond the default idle_probe timeout."""
    budget = Timeouts().idle_probe
    for name in sorted(providers.available()):
        provider = configured(name)
        try:
            seconds = float(provider.idle_timeout_to_ask())
        except NotSupported:
            declared = provider.declared_for("Local").idle_timeout
            if declared is None:
                continue
            seconds = declared
        if name == "kind":
            with pytest.raises(CannotObserve, match="raise --timeout idle_probe"):
                plan_idle_check(seconds, budget)
        else:
            assert plan_idle_check(seconds, budget).least_idle_seconds <= budget


def test_the_lab_asks_for_a_minute_or_what_its_option_says() -> None:
    lab = configured("lab")
    assert lab.idle_timeout_to_ask() == 60
    assert lab.idle_timeout_annotations(60) == {"lab.lbconform.io/idle-timeout-seconds": "60"}
    assert configured("lab", idleTimeout="240").idle_timeout_to_ask() == 240
    with pytest.raises(UsageError, match="idleTimeout=4m: give whole seconds"):
        configured("lab", idleTimeout="4m")
    assert not lab.declared().idle_reset


def test_azure_asks_for_four_minutes_in_minutes_and_chooses_the_reset() -> None:
    provider = configured("azure")
    assert provider.idle_timeout_to_ask() == 240
    assert provider.idle_timeout_annotations(240) == {azure.IDLE_TIMEOUT: "4"}
    assert provider.idle_timeout_annotations(6000) == {azure.IDLE_TIMEOUT: "100"}
    for bad in (60, 250, 6060):
        with pytest.raises(ValueError, match="whole minutes from 4 to 100"):
            provider.idle_timeout_annotations(bad)
    assert provider.idle_reset_annotations(False) == {azure.DISABLE_TCP_RESET: "true"}
    assert provider.idle_reset_annotations(True) == {azure.DISABLE_TCP_RESET: "false"}
    assert provider.declared().idle_reset


def test_aws_asks_for_the_listeners_shortest_timeout_and_cannot_turn_the_reset_off() -> None:
    provider = configured("aws")
    assert provider.idle_timeout_to_ask() == 60
    listener = "service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-80"
    assert provider.idle_timeout_annotations(60) == {listener: "tcp.idle_timeout.seconds=60"}
    assert configured("aws", idleTimeout="400").idle_timeout_to_ask() == 400
    with pytest.raises(NotSupported, match="leaves the listener's idle timeout alone"):
        configured("aws", idleTimeout="default").idle_timeout_to_ask()
    for bad in ("59", "6001", "5m"):
        with pytest.raises(UsageError, match="give seconds from 60 to 6000, or default"):
            configured("aws", idleTimeout=bad)
    with pytest.raises(NotSupported):
        provider.idle_reset_annotations(False)
    assert provider.declared().idle_reset and provider.declared().idle_timeout == 350.0


def test_gke_checks_its_fixed_minute_which_forgets_flows_silently() -> None:
    provider = configured("gke")
    with pytest.raises(NotSupported):
        provider.idle_timeout_to_ask()
    assert provider.declared_for("Local").idle_timeout == 60.0 and not provider.declared().idle_reset
