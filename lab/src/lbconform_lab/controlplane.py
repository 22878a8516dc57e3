"""The real control plane's command lines: etcd, kube-apiserver, controller-manager, scheduler,
and the node-side ones (kube-proxy, lab-kubelet).

Only flags live here; starting, waiting and stopping belong to ``lab.cluster``. The node
failure timings are deliberately short (seconds, not the upstream minute) so that suites
see a node die in seconds; they are named here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lbconform_lab import topology as topo
from lbconform_lab.state import LabDir

#: How often the node agents renew their Lease (kubelet: 10 s).
NODE_LEASE_RENEW_SECONDS: Final = 2.0
#: Lease duration the agents write on their Lease object (kubelet: 40 s).
NODE_LEASE_DURATION_SECONDS: Final = 10
#: Without a renewed Lease for this long, the node lifecycle controller marks a node NotReady
#: (upstream default 50 s). Must exceed a few renew intervals so one slow renew is no failure.
NODE_MONITOR_GRACE_SECONDS: Final = 8
#: How often the node lifecycle controller looks (upstream default 5 s).
NODE_MONITOR_PERIOD_SECONDS: Final = 1
#: Default tolerations for not-ready/unreachable taints: pods of a dead node are evicted after
#: this long (upstream 300 s). Long enough for a node-kill suite to observe the dead node.
DEFAULT_TOLERATION_SECONDS: Final = 60

#: The kubelet API's port on every node's address (the kubelet's default, 10250).
KUBELET_PORT: Final = 10250
#: The kubelet's plain-HTTP health port, on 127.0.0.1 inside the node's namespace.
KUBELET_HEALTHZ_PORT: Final = 10248
#: Who the apiserver is when it calls a kubelet (kubeadm's name); the only client the lab's
#: kubelet API accepts, where a kubelet would ask the apiserver to authorize each caller.
KUBELET_CLIENT_USER: Final = "kube-apiserver-kubelet-client"


@dataclass(frozen=True)
class Certs:
    ca: Path
    apiserver_crt: Path
    apiserver_key: Path
    sa_key: Path
    sa_pub: Path
    kubelet_client_crt: Path
    kubelet_client_key: Path


def etcd_args(etcd: Path, lab: LabDir) -> list[str]:
    url = "http://127.0.0.1:2379"
    peer = "http://127.0.0.1:2380"
    return [
        str(etcd), "--name=lab", f"--data-dir={lab.etcd_data}",
        f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=lab={peer}", "--initial-cluster-state=new",
        # The lab's etcd is disposable: fsync buys nothing and costs boot time.
        "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=2147483648",
    ]


def apiserver_args(binary: Path, certs: Certs) -> list[str]:
    return [
        str(binary),
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=0.0.0.0", f"--secure-port={topo.APISERVER_PORT}",
        f"--advertise-address={topo.APISERVER_IP}",
        f"--tls-cert-file={certs.apiserver_crt}", f"--tls-private-key-file={certs.apiserver_key}",
        f"--client-ca-file={certs.ca}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={certs.sa_pub}",
        f"--service-account-signing-key-file={certs.sa_key}",
        # logs, exec, attach, port-forward: the apiserver calls the node's kubelet API on the
        # node's InternalIP (a lab node's name resolves nowhere) and checks its serving cert.
        f"--kubelet-client-certificate={certs.kubelet_client_crt}",
        f"--kubelet-client-key={certs.kubelet_client_key}",
        f"--kubelet-certificate-authority={certs.ca}",
        "--kubelet-preferred-address-types=InternalIP",
        # Webhooks and CRD conversion are called on a ready endpoint's pod IP, not the Service's
        # ClusterIP: the apiserver's namespace routes to pods but runs no kube-proxy.
        "--enable-aggregator-routing=true",
        f"--service-cluster-ip-range={topo.SERVICE_CIDR}",
        "--service-node-port-range=30000-32767",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--default-not-ready-toleration-seconds={DEFAULT_TOLERATION_SECONDS}",
        f"--default-unreachable-toleration-seconds={DEFAULT_TOLERATION_SECONDS}",
        "--profiling=false", "--v=1",
    ]


def controller_manager_args(binary: Path, kubeconfig: Path, certs: Certs) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={certs.sa_key}", f"--root-ca-file={certs.ca}",
        "--allocate-node-cidrs=true", f"--cluster-cidr={topo.POD_CIDR}",
        f"--node-cidr-mask-size={topo.NODE_CIDR_MASK}",
        f"--service-cluster-ip-range={topo.SERVICE_CIDR}",
        f"--node-monitor-period={NODE_MONITOR_PERIOD_SECONDS}s",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
        "--terminated-pod-gc-threshold=100",
        "--profiling=false", "--v=1",
    ]


def scheduler_args(binary: Path, kubeconfig: Path) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false", "--v=1",
    ]


def kube_proxy_args(binary: Path, kubeconfig: Path, node: topo.Node) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}", f"--hostname-override={node.name}",
        "--proxy-mode=nftables", f"--cluster-cidr={topo.POD_CIDR}",
        "--nodeport-addresses=primary", "--healthz-bind-address=0.0.0.0:10256",
        "--metrics-bind-address=127.0.0.1:10249",
        # nf_conntrack_max is read-only inside a network namespace.
        "--conntrack-max-per-core=0",
        "--v=1",
    ]


def lab_kubelet_args(
    binary: Path, node: topo.Node, lab: LabDir, pods_dir: Path, *, address: str | None = None,
    port: int = KUBELET_PORT, healthz_port: int = KUBELET_HEALTHZ_PORT,
) -> list[str]:
    """The node's kubelet API server, serving the pods the agent lists in ``pods_dir``;
    ``address`` and the ports differ from the node's only in tests."""
    crt, key = lab.kubelet_serving(node.name)
    return [
        str(binary), f"--address={address or node.ip}", f"--port={port}",
        f"--healthz-port={healthz_port}",
        f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
        f"--client-ca-file={lab.pki / 'ca.crt'}", f"--allowed-client={KUBELET_CLIENT_USER}",
        f"--pods-dir={pods_dir}",
    ]
