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
