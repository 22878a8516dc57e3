"""Node chaos for providers whose implementation has no machines of its own: on a local cluster (the
lab) a node's death, its start and a kube-proxy restart are that cluster's (``lbconform.localcluster``),
whatever load balancer runs there; elsewhere they are not supported, with the extension point named."""

from __future__ import annotations

from lbconform.localcluster import NodePower, owner_of
from lbconform.providers.base import NotSupported, Provider


class LocalNodePower(Provider):
    """``kill_node``, ``start_node`` and ``restart_kube_proxy`` through the local cluster that serves
    the provider's API, if one does."""

    def _node_power(self, what: str, method: str) -> NodePower:
        local = owner_of(self.api)
        if local is None:
            raise NotSupported(f"the {self.name} provider cannot {what} outside a local cluster: the "
                               f"implementation has no machines of its own (extension point: {method})")
        return local.node_power()

    def kill_node(self, name: str) -> None:
        self._node_power("kill a node", "kill_node").kill_node(name)

    def start_node(self, name: str) -> None:
        self._node_power("start a node", "start_node").start_node(name)

    def restart_kube_proxy(self, node: str) -> None:
        self._node_power("restart kube-proxy", "restart_kube_proxy").restart_kube_proxy(node)
