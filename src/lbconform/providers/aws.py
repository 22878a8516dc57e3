"""The provider of AWS Network Load Balancers as the AWS Load Balancer Controller makes them.

Every test Service carries ``service.beta.kubernetes.io/aws-load-balancer-type: external``
(the controller, not the legacy in-tree provider, reconciles it), the target type of the
provider's mode (``aws-load-balancer-nlb-target-type``: ``instance``, the default, or
``ip``) and the scheme (``aws-load-balancer-scheme``, ``internet-facing`` unless the
``scheme`` option says ``internal``). One target group per Service port.

The pool: the NLB whose ``DNSName`` is the Service's ingress hostname
(``elbv2.describe_load_balancers``), its target groups (``describe_target_groups``), and
``describe_target_health`` for each. ``instance`` targets make a node pool: each target ID
is an EC2 instance, mapped to its Node's InternalIP by the Node's providerID
(``aws:///<zone>/<instance>``), else by ``ec2.describe_instances``. ``ip`` targets make a
pod pool of pod IPs (``--mode ip``, or ``pod_pool_annotations()``; needs the VPC CNI).
A target is healthy only in state ``healthy``; ``initial``, ``unhealthy``, ``unused``,
``unavailable`` and ``draining`` (deregistered, finishing its deregistration delay) are
listed as unhealthy.

Declared values (AWS Load Balancer Controller service annotations, defaults): health check
every 10 s, 3 successes / 3 failures, TCP on the traffic port for externalTrafficPolicy
Cluster, HTTP ``/healthz`` on the healthCheckNodePort for Local; NLB TCP idle timeout 350 s
(then a reset on the flow's next packet, which a Service cannot turn off); target group
deregistration delay 300 s.

Idle timeout: the idle suites' Services ask for 60 s, the NLB's shortest, with the TCP listener
attribute ``tcp.idle_timeout.seconds`` (annotation ``aws-load-balancer-listener-attributes.TCP-80``,
controller v2.9.0 and later; 60 to 6000 s). The ``idleTimeout`` option asks for another value,
or with ``default`` leaves the listener alone, so that the suites check the fixed 350 s (older
controllers, which ignore the annotation).

Not claimed: ``SessionAffinity``. The NLB hashes each flow on its 5-tuple, so one client's
connections reach different nodes, and kube-proxy's ClientIP affinity is per node; keeping a
client on one backend needs the target group's ``stickiness.type=source_ip`` attribute,
which the controller does not derive from ``spec.sessionAffinity``. Claim it with
``--features SessionAffinity`` when the Services carry that attribute.
Not claimed either: ``RequestedAddress``. The controller does not read ``spec.loadBalancerIP``;
an NLB takes Elastic IPs through the ``aws-load-balancer-eip-allocations`` annotation, one per
subnet, which this provider does not drive yet.

Options (``--provider-option NAME=VALUE``):

- ``region`` (env ``AWS_REGION``, ``AWS_DEFAULT_REGION``): the cluster's region.
- ``profile`` (env ``AWS_PROFILE``): a named profile of the AWS configuration.
- ``scheme``: ``internet-facing`` (default) or ``internal``.
- ``idleTimeout``: seconds the idle suites' Services ask for (default 60), or ``default``.

Credentials are boto3's usual chain. The SDK is the ``aws`` extra: ``pip install 'lbconform[aws]'``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from lbconform.config import Timeouts
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.kube.rawapi import RawApi
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

PREFIX = "service.beta.kubernetes.io/aws-load-balancer-"
TARGET_TYPE = PREFIX + "nlb-target-type"
#: The listener attributes of the suites' Service port (manifests/backend-service.yaml: TCP 80).
LISTENER_ATTRIBUTES = PREFIX + "listener-attributes.TCP-80"
#: The TCP idle timeouts an NLB listener takes (the default is 350 s).
IDLE_MIN, IDLE_MAX, IDLE_DEFAULT = 60, 6000, 350
HEALTHY = "healthy"


def find_load_balancer_arn(pages: Iterable[Mapping[str, Any]], hostname: str) -> str:
    """``describe_load_balancers`` pages -> the ARN of the load balancer with this DNS name."""
    hostname = hostname.lower().rstrip(".")
    for page in pages:
        for lb in page.get("LoadBalancers") or []:
            if str(lb.get("DNSName", "")).lower().rstrip(".") == hostname:
                return str(lb["LoadBalancerArn"])
    return ""


def instance_addresses(reservations: Mapping[str, Any]) -> dict[str, str]:
    """``ec2.describe_instances`` -> instance ID -> private IPv4 address."""
    return {i["InstanceId"]: i["PrivateIpAddress"]
            for r in reservations.get("Reservations") or [] for i in r.get("Instances") or []
            if i.get("InstanceId") and i.get("PrivateIpAddress")}


def node_instance_addresses(nodes: NodeIndex) -> dict[str, str]:
    """Instance ID -> InternalIP, from the Nodes' providerIDs (``aws:///zone/i-...``)."""
    return {key.rsplit("/", 1)[-1]: ip for key, ip in nodes.ip_by_provider_id.items()
            if key.rsplit("/", 1)[-1].startswith("i-")}


def parse_target_health(descriptions: Iterable[Mapping[str, Any]], target_type: str,
                        instance_ips: Mapping[str, str], node_names: Mapping[str, str]) -> list[PoolMember]:
    """One target group's ``TargetHealthDescriptions`` -> members (node IPs or pod IPs)."""
    members = []
    for description in descriptions:
        target_id = str(description.get("Target", {}).get("Id", ""))
        healthy = description.get("TargetHealth", {}).get("State") == HEALTHY
        if target_type == "instance":
            address = instance_ips.get(target_id, "")
            members.append(PoolMember(address=address, healthy=healthy,
                                      name=node_names.get(address, "") or target_id))
        else:
            members.append(PoolMember(address=target_id, healthy=healthy))
    return members


def merge_target_groups(groups: Iterable[list[PoolMember]]) -> list[PoolMember]:
    """Members over all target groups (one per port): healthy only if healthy in each."""
    merged: dict[tuple[str, str], PoolMember] = {}
    for members in groups:
        for m in members:
            key = (m.address, m.name if not m.address else "")
            seen = merged.get(key)
            healthy = m.healthy if seen is None else bool(seen.healthy) and bool(m.healthy)
            merged[key] = PoolMember(m.address, healthy, m.name)
    return sorted(merged.values(), key=lambda m: (m.address, m.name))


class AWSProvider(Provider):
    name = "aws"
    modes = ("instance", "ip")
    mode = "instance"
    options_help: ClassVar[Mapping[str, str]] = {
        "region": "the cluster's region (env AWS_REGION or AWS_DEFAULT_REGION)",
        "profile": "a named AWS profile (env AWS_PROFILE)",
        "scheme": "internet-facing (default) or internal",
        "idleTimeout": f"seconds the idle suites' Services ask for ({IDLE_MIN}-{IDLE_MAX}, default "
                       f"{IDLE_MIN}), or 'default' for the listener's fixed 350 s",
    }
    _session: Any = None

    def features(self) -> set[Feature]:
        # LoadBalancerRestart: the NLB's control plane is AWS's; the controller in the cluster only
        # reconciles it, and no provider hook restarts it yet.
        return set(Feature) - {Feature.SESSION_AFFINITY, Feature.REQUESTED_ADDRESS,
                               Feature.LOAD_BALANCER_RESTART}

    def declared(self) -> Declared:
        return Declared(
            health_check_interval=10.0, healthy_threshold=3, unhealthy_threshold=3,
            idle_timeout=float(IDLE_DEFAULT), idle_reset=True,
            notes={"source": "AWS Load Balancer Controller service annotation defaults (healthcheck "
                             "interval 10, healthy/unhealthy threshold 3); Network Load Balancer "
                             "documentation (TCP idle timeout 350 s, deregistration delay 300 s)",
                   "health_check": "TCP traffic port (eTP Cluster); HTTP /healthz on "
                                   "healthCheckNodePort (eTP Local)",
                   "deregistration_delay": "300"})

    def timeouts(self) -> Timeouts:
        # An NLB takes minutes to become active, its DNS name minutes to resolve, and a target
        # needs 3 passing checks (30 s) after a registration that itself can take minutes.
        return Timeouts(lb_create=420, lb_propagation=600, lb_delete=420, endpoint_lag=300,
                        health_transition=90, rollout=300, namespace_delete=600, request=10)

    def service_annotations(self) -> dict[str, str]:
        scheme = self.option("scheme", default="internet-facing")
        if scheme not in ("internet-facing", "internal"):
            raise UsageError(f"--provider-option scheme={scheme}: use internet-facing or internal")
        return {PREFIX + "type": "external", TARGET_TYPE: self.mode, PREFIX + "scheme": scheme}

    def configure(self, api: RawApi | None, options: Mapping[str, str]) -> None:
        super().configure(api, options)
        with contextlib.suppress(NotSupported):
            self.idle_timeout_to_ask()  # a bad idleTimeout fails the run before it makes anything

    def idle_timeout_to_ask(self) -> int:
        text = self.option("idleTimeout", default=str(IDLE_MIN))
        if text == "default":
            raise NotSupported("the aws provider leaves the listener's idle timeout alone "
                               "(--provider-option idleTimeout=default)")
        if not text.isdigit() or not IDLE_MIN <= int(text) <= IDLE_MAX:
            raise UsageError(f"--provider-option idleTimeout={text}: give seconds from {IDLE_MIN} to "
                             f"{IDLE_MAX}, or default")
        return int(text)

    def idle_timeout_annotations(self, seconds: int) -> dict[str, str]:
        if not IDLE_MIN <= seconds <= IDLE_MAX:
            raise ValueError(f"an NLB's TCP idle timeout is {IDLE_MIN} to {IDLE_MAX}s, not {seconds}s")
        return {LISTENER_ATTRIBUTES: f"tcp.idle_timeout.seconds={seconds}"}

    def pod_pool_annotations(self) -> dict[str, str]:
        return {TARGET_TYPE: "ip"}

    def needs_node_ports(self) -> bool:
        return self.mode == "instance"

    def pool_kind(self, service: ServiceRef) -> str:
        target_type = self.mode
        if self.api is not None:
            svc = self.api.get(f"/api/v1/namespaces/{service.namespace}/services/{service.name}")
            target_type = svc.get("metadata", {}).get("annotations", {}).get(TARGET_TYPE, target_type)
        return POD_POOL if target_type == "ip" else NODE_POOL

    def backend_pool(self, service: ServiceRef) -> list[PoolMember]:
        session = self.session()
        if not service.ingress:
            raise UsageError(f"service {service.namespace}/{service.name} has no ingress hostname yet")
        elbv2 = session.client("elbv2")
        arn = find_load_balancer_arn(elbv2.get_paginator("describe_load_balancers").paginate(),
                                     service.ingress)
        if not arn:
            return []
        nodes = cluster_nodes(self.api)
        instance_ips = node_instance_addresses(nodes)
        groups = []
        for group in elbv2.describe_target_groups(LoadBalancerArn=arn).get("TargetGroups") or []:
            descriptions = elbv2.describe_target_health(
                TargetGroupArn=group["TargetGroupArn"]).get("TargetHealthDescriptions") or []
            target_type = str(group.get("TargetType", "instance"))
            if target_type == "instance":
                missing = sorted({str(d["Target"]["Id"]) for d in descriptions} - set(instance_ips))
                if missing:
                    instance_ips.update(instance_addresses(
                        session.client("ec2").describe_instances(InstanceIds=missing)))
            groups.append(parse_target_health(descriptions, target_type, instance_ips, nodes.name_by_ip))
        return merge_target_groups(groups)

    def session(self) -> Any:
        """The boto3 session, made once (imports the SDK on first use)."""
        boto3 = import_sdk(self.name, "boto3")
        if self._session is None:
            region = self.option("region", "AWS_REGION", "AWS_DEFAULT_REGION")
            if not region:
                raise UsageError("the aws provider needs --provider-option region=... "
                                 "(or AWS_REGION or AWS_DEFAULT_REGION)")
            profile = self.option("profile", "AWS_PROFILE") or None
            self._session = boto3.Session(region_name=region, profile_name=profile)
        return self._session
