"""The lab's reference load balancer: a controller and an nftables data plane.

It runs in the ``lbc-lb`` namespace, the client's only way into the lab, and behaves like
the cloud load balancers it stands for, for the same kernel reasons: a flow's backend is a
hash of its 5-tuple over the healthy set, conntrack pins it, an idle flow is forgotten after
the Service's idle timeout and hashed again. Started with a defect, it misbehaves in one
named way so that the suites can prove they catch it.
"""

from typing import Final

#: The ``loadBalancerClass`` it serves, besides Services without one.
LB_CLASS: Final = "lbconform.io/lab"
