"""Named variations of the manifests: each tweak changes one thing and says which.

Tweaks take a parsed object and change it in place; ``manifests.load`` applies them. A
tweak that does not apply to an object's kind leaves the object alone, so one list of
tweaks can be passed for a whole manifest file.
"""

from __future__ import annotations

from typing import Any

from lbconform.kube.manifests import Tweak
from lbconform.kube.rawapi import Json

__all__ = ["Tweak"]


def _pod_spec(obj: Json) -> Json | None:
    if obj["kind"] == "Pod":
        spec: Json = obj["spec"]
        return spec
    if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"):
        tmpl: Json = obj["spec"]["template"]["spec"]
        return tmpl
    return None


def _containers(obj: Json) -> list[Json]:
    spec = _pod_spec(obj)
    return list(spec["containers"]) if spec else []


def traffic_policy(policy: str) -> Tweak:
    """externalTrafficPolicy ``Cluster`` or ``Local``."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["externalTrafficPolicy"] = policy

    tweak.__name__ = f"traffic_policy_{policy.lower()}"
    return tweak


def traffic_policy_local(obj: Json) -> None:
    """externalTrafficPolicy: Local (only nodes with a ready local endpoint take traffic)."""
    if obj["kind"] == "Service":
        obj["spec"]["externalTrafficPolicy"] = "Local"


def traffic_policy_cluster(obj: Json) -> None:
    if obj["kind"] == "Service":
        obj["spec"]["externalTrafficPolicy"] = "Cluster"


def service_type(kind: str) -> Tweak:
    """The Service's type; a change away from LoadBalancer drops the fields that type owns,
    as the API requires of an update (node ports too, for ClusterIP)."""
    def tweak(obj: Json) -> None:
        if obj["kind"] != "Service":
            return
        spec = obj["spec"]
        spec["type"] = kind
        if kind != "LoadBalancer":
            for key in ("externalTrafficPolicy", "healthCheckNodePort", "allocateLoadBalancerNodePorts",
                        "loadBalancerSourceRanges", "loadBalancerClass"):
                spec.pop(key, None)
        if kind == "ClusterIP":
            for port in spec["ports"]:
                port.pop("nodePort", None)

    tweak.__name__ = f"service_type_{kind}"
    return tweak


def set_port(port: int) -> Tweak:
    """The Service's first port number (the target port stays)."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["ports"][0]["port"] = port

    tweak.__name__ = f"port_{port}"
    return tweak


def replicas(count: int) -> Tweak:
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Deployment":
            obj["spec"]["replicas"] = count

    tweak.__name__ = f"replicas_{count}"
    return tweak


def one_per_node(obj: Json) -> None:
    """Required pod anti-affinity on the hostname: no two backends share a node."""
    spec = _pod_spec(obj)
    if spec is None:
        return
    meta = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"]["metadata"]
    labels = meta["labels"]
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": "kubernetes.io/hostname"}]}}


def grace_period(seconds: int) -> Tweak:
    """terminationGracePeriodSeconds of the pods."""
    def tweak(obj: Json) -> None:
        spec = _pod_spec(obj)
        if spec is not None:
            spec["terminationGracePeriodSeconds"] = seconds

    tweak.__name__ = f"grace_period_{seconds}s"
    return tweak


def pre_stop_sleep(seconds: int) -> Tweak:
    """A preStop hook that sleeps, so endpoints drain before the app sees SIGTERM."""
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            c.setdefault("lifecycle", {})["preStop"] = {"sleep": {"seconds": seconds}}

    tweak.__name__ = f"pre_stop_sleep_{seconds}s"
    return tweak


def pre_stop_exec_sleep(seconds: int) -> Tweak:
    """A preStop hook that runs ``sleep``: unlike the sleep action, the API lets it outlast the
    grace period (which then cuts it short), so a broken ordering can be built."""
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            c.setdefault("lifecycle", {})["preStop"] = {"exec": {"command": ["sleep", str(seconds)]}}

    tweak.__name__ = f"pre_stop_exec_sleep_{seconds}s"
    return tweak


def delay_shutdown(seconds: int) -> Tweak:
    """agnhost netexec keeps serving this long after SIGTERM (with /readyz at 503)."""
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            args: list[Any] = [a for a in c.get("args", []) if not str(a).startswith("--delay-shutdown")]
            c["args"] = [*args, f"--delay-shutdown={seconds}"]

    tweak.__name__ = f"delay_shutdown_{seconds}s"
    return tweak


def node_selector(node: str) -> Tweak:
    """Pods only on the named node."""
    def tweak(obj: Json) -> None:
        spec = _pod_spec(obj)
        if spec is not None:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}

    tweak.__name__ = f"node_selector_{node}"
    return tweak


def host_network(obj: Json) -> None:
    spec = _pod_spec(obj)
    if spec is not None:
        spec["hostNetwork"] = True


def image(ref: str) -> Tweak:
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            c["image"] = ref

    tweak.__name__ = "image"
    return tweak


def env(name: str, value: str | None = None, field_path: str | None = None) -> Tweak:
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            var: Json = {"name": name}
            if field_path:
                var["valueFrom"] = {"fieldRef": {"fieldPath": field_path}}
            else:
                var["value"] = value or ""
            c.setdefault("env", []).append(var)

    tweak.__name__ = f"env_{name}"
    return tweak


def set_env(values: dict[str, str]) -> Tweak:
    """Environment variables of every container, replacing those of the same name."""
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            kept = [v for v in c.get("env", []) if v["name"] not in values]
            c["env"] = kept + [{"name": k, "value": v} for k, v in values.items()]

    tweak.__name__ = "set_env"
    return tweak


def avoid_node(node: str) -> Tweak:
    """Required node affinity: no pod on the named node."""
    def tweak(obj: Json) -> None:
        spec = _pod_spec(obj)
        if spec is not None:
            hostname = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}
            term = {"matchExpressions": [hostname]}
            spec.setdefault("affinity", {})["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}

    tweak.__name__ = f"avoid_node_{node}"
    return tweak


def liveness_exec(command: list[str], period: int = 1, failures: int = 1) -> Tweak:
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            c["livenessProbe"] = {"exec": {"command": command}, "periodSeconds": period,
                                  "failureThreshold": failures}

    tweak.__name__ = "liveness_exec"
    return tweak


def container_args(args: list[str]) -> Tweak:
    """Every container's ``args`` (agnhost: its subcommand and flags)."""
    def tweak(obj: Json) -> None:
        for c in _containers(obj):
            c["args"] = list(args)

    tweak.__name__ = "container_args"
    return tweak


def service_annotations(values: dict[str, str]) -> Tweak:
    """Service annotations, such as a provider's or the lab LB's ``lab.lbconform.io/*``."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["metadata"].setdefault("annotations", {}).update(values)

    tweak.__name__ = "service_annotations"
    return tweak


def session_affinity_client_ip(obj: Json) -> None:
    if obj["kind"] == "Service":
        obj["spec"]["sessionAffinity"] = "ClientIP"


def session_affinity_none(obj: Json) -> None:
    """sessionAffinity: None (each new connection is balanced on its own)."""
    if obj["kind"] == "Service":
        obj["spec"]["sessionAffinity"] = "None"
        obj["spec"].pop("sessionAffinityConfig", None)


def no_source_ranges(obj: Json) -> None:
    """No loadBalancerSourceRanges: every client is admitted."""
    if obj["kind"] == "Service":
        obj["spec"].pop("loadBalancerSourceRanges", None)


def source_ranges(*cidrs: str) -> Tweak:
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["loadBalancerSourceRanges"] = list(cidrs)

    tweak.__name__ = "source_ranges"
    return tweak


def no_node_ports(obj: Json) -> None:
    """allocateLoadBalancerNodePorts: false (eTP Cluster only: Local needs its health check port)."""
    if obj["kind"] == "Service":
        obj["spec"]["allocateLoadBalancerNodePorts"] = False


def node_ports(obj: Json) -> None:
    """allocateLoadBalancerNodePorts: true (the default)."""
    if obj["kind"] == "Service":
        obj["spec"]["allocateLoadBalancerNodePorts"] = True


def load_balancer_class(name: str) -> Tweak:
    """spec.loadBalancerClass (KEP-1959): only the implementation that owns the class serves it."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["loadBalancerClass"] = name

    tweak.__name__ = f"load_balancer_class_{name}"
    return tweak


def load_balancer_ip(address: str) -> Tweak:
    """spec.loadBalancerIP: the Service asks for this address (deprecated upstream, still read)."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["loadBalancerIP"] = address

    tweak.__name__ = f"load_balancer_ip_{address}"
    return tweak


def udp_beside_tcp(obj: Json) -> None:
    """A UDP port with the number of the first (TCP) port, to netexec's UDP echo: one Service
    port number, both protocols (mixed protocols, KEP-1435)."""
    if obj["kind"] == "Service":
        ports = obj["spec"]["ports"]
        ports.append({"name": "udp", "port": ports[0]["port"], "targetPort": "udp", "protocol": "UDP"})


def without_port(name: str) -> Tweak:
    """The Service without its port ``name``."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["ports"] = [p for p in obj["spec"]["ports"] if p.get("name") != name]

    tweak.__name__ = f"without_port_{name}"
    return tweak


def tcp_port(name: str, port: int) -> Tweak:
    """Add a TCP service port ``name`` to netexec's HTTP server."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["ports"].append({"name": name, "port": port, "targetPort": "http", "protocol": "TCP"})

    tweak.__name__ = f"tcp_port_{name}"
    return tweak


def udp_port(port: int = 8081) -> Tweak:
    """Add a UDP service port to netexec's UDP echo server."""
    def tweak(obj: Json) -> None:
        if obj["kind"] == "Service":
            obj["spec"]["ports"].append({"name": "udp", "port": port, "targetPort": "udp", "protocol": "UDP"})

    tweak.__name__ = f"udp_port_{port}"
    return tweak

