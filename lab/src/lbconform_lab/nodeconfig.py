"""A real lab node's configuration files and command lines: containerd's, the kubelet's, and the
CNI template containerd renders once the kubelet hands it the node's podCIDR.

Pure text from a ``NodePaths``: starting the processes and the node's namespaces belong to
``lbconform_lab.realnode``. Where a setting is not upstream's default, its comment says why this
machine needs it (see FIELD-NOTES, "Real nodes"): cgroup v1 without systemd, no
CAP_SYS_RESOURCE, several nodes on one machine, no registry and no name server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lbconform_lab import controlplane, images
from lbconform_lab import topology as topo

#: How long a node's Lease lasts (upstream 40 s); the kubelet renews it every quarter of that,
#: 2.5 s, inside the node lifecycle controller's grace period (``controlplane``).
NODE_LEASE_SECONDS: Final = 10
#: The kubelet's sysctls (its ``setupKernelTunables``), which the lab sets before a kubelet starts
#: and puts back when its last lab goes (``lbconform_lab.machine``).
KUBELET_SYSCTLS: Final = {
    "vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10, "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000, "kernel/keys/root_maxbytes": 25000000,
}


@dataclass(frozen=True)
class NodePaths:
    """Where one real node's files are: under its directory in the lab directory, except what the
    node's own mount namespace holds (the kubelet's root and the pods' logs, on its tmpfs)."""

    node: topo.Node
    dir: Path
    #: The node's cgroup under every hierarchy's root (the kubelet's cgroupRoot).
    cgroup: str
    bin_dir: Path
    cni_bin_dir: Path

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd" / "state"

    @property
    def sockets(self) -> Path:
        """containerd's sockets: made anew at each boot, with its state."""
        return self.dir / "containerd" / "run"

    @property
    def socket(self) -> Path:
        return self.sockets / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.dir / "containerd" / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def cni_template(self) -> Path:
        return self.dir / "cni" / "template.json"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.dir / "cni" / "ipam"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet.yaml"

    @property
    def resolv_conf(self) -> Path:
        return self.dir / "resolv.conf"

    @property
    def system_cgroup(self) -> str:
        """Where the node's kubelet and containerd run."""
        return f"{self.cgroup}/system"

    @property
    def shims_cgroup(self) -> str:
        """Where containerd puts the pods' shims."""
        return f"{self.cgroup}/shims"


#: The kubelet's own directories, inside the node's mount namespace (its tmpfs /var/lib and
#: /var/log): the paths ``--root-dir`` does not move (the device-plugin socket) stay the node's.
KUBELET_ROOT: Final = "/var/lib/kubelet"
POD_LOGS: Final = "/var/log/pods"


def _toml_str(value: str | Path) -> str:
    return json.dumps(str(value))


def containerd_toml(p: NodePaths) -> str:
    """containerd's configuration: its own root, state, sockets and runc root; the CRI's stream
    server on the node's loopback (the kubelet beside it proxies exec, attach and port-forward);
    the pause image pinned; the pods' network from the CNI template; shims in the node's cgroup."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return "\n".join([
        "version = 3",
        f"root = {_toml_str(p.containerd_root)}",
        f"state = {_toml_str(p.containerd_state)}",
        "[grpc]",
        f"  address = {_toml_str(p.socket)}",
        "[ttrpc]",
        f"  address = {_toml_str(str(p.socket) + '.ttrpc')}",
        "[plugins.'io.containerd.grpc.v1.cri']",
        "  disable_tcp_service = true",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        # NRI's socket path is fixed machine-wide: two nodes would take each other's.
        "[plugins.'io.containerd.nri.v1.nri']",
        "  disable = true",
        "[plugins.'io.containerd.cri.v1.images']",
        '  snapshotter = "overlayfs"',
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
        f"  sandbox = {_toml_str(images.PAUSE)}",
        f"[{runtime}]",
        # Without CAP_SYS_RESOURCE a negative oom_score_adj cannot be written: runc's nsexec fails
        # ("can't get final child's PID from pipe: EOF") unless the CRI keeps it at or above ours.
        "  restrict_oom_score_adj = true",
        # The pods' network namespaces under the node's state, not the machine's /run/netns.
        "  netns_mounts_under_state_dir = true",
        f"[{runtime}.cni]",
        f"  bin_dirs = [{_toml_str(p.cni_bin_dir)}]",
        f"  conf_dir = {_toml_str(p.cni_conf_dir)}",
        f"  conf_template = {_toml_str(p.cni_template)}",
        f"[{runtime}.containerd]",
        '  default_runtime_name = "runc"',
        f"[{runtime}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{runtime}.containerd.runtimes.runc.options]",
        f"  BinaryName = {_toml_str(p.bin_dir / 'runc')}",
        f"  Root = {_toml_str(p.runc_root)}",
        # cgroupfs: PID 1 is not systemd.
        "  SystemdCgroup = false",
        f"  ShimCgroup = {_toml_str(p.shims_cgroup)}",
        "",
    ])


def cni_template(p: NodePaths) -> str:
    """The pods' network, as containerd renders it with the node's podCIDRs: a veth per pod to
    the node (ptp), addresses from the podCIDR (host-local), no masquerade (a pod's address is
    routed through the lab as it is)."""
    ranges = "[{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{\"subnet\": \"{{$r}}\"}]{{end}}]"
    return (
        '{"cniVersion": "1.0.0", "name": "lbc-pods", "plugins": [{"type": "ptp", "ipMasq": false, '
        '"ipam": {"type": "host-local", "ranges": ' + ranges + ', "routes": [{"dst": "0.0.0.0/0"}], '
        f'"dataDir": {json.dumps(str(p.cni_ipam_dir))}}}}}]}}\n')


def kubelet_yaml(p: NodePaths, ca: Path, serving: tuple[Path, Path]) -> str:
    """The kubelet's configuration (JSON, which is YAML): its API on the node's address with the
    lab CA's client certificates and the apiserver's authorization, cgroupfs under the node's own
    cgroup, containerd's socket, and what this machine needs."""
    crt, key = serving
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": p.node.ip, "port": controlplane.KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": controlplane.KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(crt), "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{p.socket}",
        "cgroupDriver": "cgroupfs", "cgroupRoot": p.cgroup, "cgroupsPerQOS": True,
        # cgroup v1: refused by default since 1.35 (KEP-5573); allowed, with a warning.
        "failCgroupV1": False,
        # The kubelet's own -999 needs CAP_SYS_RESOURCE.
        "oomScoreAdj": 0,
        "podLogsDirectory": POD_LOGS,
        # No name server in the lab: a pod resolves nothing, as no node asks the machine's.
        "resolvConf": str(p.resolv_conf),
        "clusterDomain": "cluster.local",
        "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
        "failSwapOn": False,
        # Every node sees the machine's disk and memory (cAdvisor): never evict or collect
        # images for the machine's own use of them.
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                         "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
    }
    return json.dumps(config, indent=2) + "\n"


def kubelet_args(binary: Path, p: NodePaths, kubeconfig: Path) -> list[str]:
    return [str(binary), f"--config={p.kubelet_config}", f"--kubeconfig={kubeconfig}",
            f"--hostname-override={p.node.name}", f"--node-ip={p.node.ip}", f"--root-dir={KUBELET_ROOT}",
            "--v=1"]


def containerd_args(binary: Path, p: NodePaths) -> list[str]:
    return [str(binary), f"--config={p.containerd_config}", "--log-level=warn"]
