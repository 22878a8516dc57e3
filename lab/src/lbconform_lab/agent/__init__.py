"""The node agent: the lab's kubelet.

One agent runs in each node's network namespace. It registers the Node, renews its Lease,
supervises the real kube-proxy, and runs every pod the real scheduler binds to its node as
local processes in a network namespace of the pod's own, with the kubelet's probe, status
and termination semantics.
"""
