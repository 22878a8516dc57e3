"""The one place that names the versions of everything the lab builds.

Changing a version here changes the cache key, so the next ``lab build`` builds afresh
and the old binaries stay untouched beside the new ones.
"""

from __future__ import annotations

from typing import Final

#: The Kubernetes release whose control plane, kube-proxy, kubectl and agnhost the lab runs.
KUBERNETES_VERSION: Final = "v1.36.3"

#: etcd server, built from its own module: >= 3.5.13 is needed for RequestWatchProgress.
ETCD_VERSION: Final = "v3.6.16"

#: MetalLB, the first load balancer the lab hosts that this project did not write (layer 2
#: mode); v0.15.2's whole module graph resolves through the proxy, v0.16.2's does not.
METALLB_VERSION: Final = "v0.15.2"

#: kube-vip (services mode, ARP) and the cloud provider that gives its Services addresses. Both
#: resolve through the proxy with the checksum database; kube-vip v1.2.3 is refused by the proxy
#: and v1.0.0 needs the database bypassed. ``go install module@version`` fails for both (the
#: proxy refuses their ``@v/list``), so they build in modules of their own, as MetalLB does.
KUBE_VIP_VERSION: Final = "v1.2.2"
KUBE_VIP_CLOUD_PROVIDER_VERSION: Final = "v0.0.12"

# The node components (``lbconform lab build --with nodes``): a kubelet with containerd, runc and
# the CNI plugins per node. The kubelet and the pause program come from KUBERNETES_VERSION's
# module. Each pin is the newest patch the proxy serves of the line named.

#: containerd: Kubernetes 1.36 is supported with containerd 2.2 and later (1.35 was the last
#: release for containerd 1.x). v2.2.9 is the newest 2.2 patch served; 2.3 and 2.4 are served too
#: but were not tried with this kubelet.
CONTAINERD_VERSION: Final = "v2.2.9"

#: runc: containerd v2.2.9 is tested with runc v1.3.6 (its script/setup/runc-version); v1.3.7 is
#: the newest 1.3 patch served. Its version comes from the VERSION file it embeds.
RUNC_VERSION: Final = "v1.3.7"

#: The CNI plugins (ptp, bridge, host-local, loopback, portmap): v1.10.0 is the newest served. Its
#: go.mod asks for Go 1.26.8, more than MINIMUM_GO.
CNI_PLUGINS_VERSION: Final = "v1.10.0"

#: crictl, the CRI client for looking into a node's containerd: v1.37.0 is the newest served
#: (v1.35.0 is refused, no v1.36 is listed); it speaks CRI v1, as the kubelet does.
CRICTL_VERSION: Final = "v1.37.0"

#: The Go release the pinned Kubernetes module asks for (its go.mod's ``go`` line).
MINIMUM_GO: Final = (1, 26)

#: Commands built from the ``k8s.io/kubernetes`` module, by binary name.
KUBERNETES_COMMANDS: Final = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "agnhost": "k8s.io/kubernetes/test/images/agnhost",
}

#: Commands built from the etcd server module, by binary name.
ETCD_COMMANDS: Final = {"etcd": "go.etcd.io/etcd/server/v3"}

#: Commands built from MetalLB's module, by binary name (prefixed: "controller" alone would
#: name nothing in particular in the lab's cache).
METALLB_COMMANDS: Final = {
    "metallb-controller": "go.universe.tf/metallb/controller",
    "metallb-speaker": "go.universe.tf/metallb/speaker",
}

#: Commands built from kube-vip's module and its cloud provider's, by binary name (the module
#: roots are the main packages).
KUBE_VIP_COMMANDS: Final = {"kube-vip": "github.com/kube-vip/kube-vip"}
KUBE_VIP_CLOUD_PROVIDER_COMMANDS: Final = {
    "kube-vip-cloud-provider": "github.com/kube-vip/kube-vip-cloud-provider"}

#: The node's kubelet, built in the Kubernetes build module beside the other Kubernetes commands;
#: the pause program is C, compiled from the same module's download.
KUBELET_COMMANDS: Final = {"kubelet": "k8s.io/kubernetes/cmd/kubelet"}
PAUSE_SOURCE: Final = "build/pause/linux/pause.c"

#: containerd's daemon, its client and the runc shim, by binary name.
CONTAINERD_COMMANDS: Final = {
    "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
    "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
    "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
}

#: runc's module root is its main package.
RUNC_COMMANDS: Final = {"runc": "github.com/opencontainers/runc"}

#: The CNI plugins a node's network needs, by binary name (the names containerd looks for).
CNI_PLUGINS_COMMANDS: Final = {
    "ptp": "github.com/containernetworking/plugins/plugins/main/ptp",
    "bridge": "github.com/containernetworking/plugins/plugins/main/bridge",
    "loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
    "host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
    "portmap": "github.com/containernetworking/plugins/plugins/meta/portmap",
}

CRICTL_COMMANDS: Final = {"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"}
