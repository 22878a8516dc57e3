"""Each Service's pool from pass to pass: the backends it should have now, and when it gets them.

``plan.pool`` says which backends the Service's spec, its EndpointSlices and the nodes give; here
that becomes the Service's pool, in pod mode in batches (``pool-update-delay-seconds``: a later pass
applies a change once it is that old, as cloud target groups do), remembering when each backend
joined the already provisioned Service and every backend it ever had.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lbconform_lab.lb import plan
from lbconform_lab.lb.defects import At, PoolHistory, apply
from lbconform_lab.lb.model import Backend, Json, NodeInfo
from lbconform_lab.lb.service import ServiceState


def desired(svc: Json, st: ServiceState, slices: list[Json], nodes: list[NodeInfo],
            warn: Callable[[str, str], None]) -> dict[str, Backend]:
    """The backends the Service should have now. Node and pod modes serve a Service without node
    ports; nodeport mode cannot, and says so (``warn(reason, message)``) when it is provisioned and
    when its pool empties for it."""
    without_node_ports = svc["spec"].get("allocateLoadBalancerNodePorts") is False
    if without_node_ports and not apply(At.NODE_PORTS, True, st.defects):
        wanted: dict[str, Backend] = {}
    elif st.params.mode == "nodeport" and without_node_ports:
        if st.pool or st.counters["reconciles"] == 0:
            warn("UnsupportedConfiguration", "nodeport mode needs node ports, and "
                 "allocateLoadBalancerNodePorts is false: use mode node or pod")
        wanted = {}
    else:
        wanted = plan.pool(svc, slices, plan.eligible(nodes, st.defects), st.params, st.defects)
    for k, b in wanted.items():
        st.first_health.setdefault(k, b.health)
    return apply(At.CHECK_TARGETS, wanted, st.defects, st.first_health)


def update(st: ServiceState, wanted: dict[str, Backend]) -> None:
    """Make ``wanted`` the Service's pool, now or (pod mode, with a delay) once the change is old
    enough; a pass runs at least every ``controller.MAX_PASS_SECONDS`` to apply it."""
    wanted = apply(At.POOL, wanted, st.defects, PoolHistory(st.params.mode, st.ever_seen))
    st.ever_seen.update(wanted)
    if wanted == st.pool:
        st.pending_pool = None
        return
    delay = st.params.pool_update_delay if st.params.mode == "pod" else 0.0
    now = time.monotonic()
    if delay > 0:
        if st.pending_pool is None:
            st.pending_since = now
        st.pending_pool = wanted
        if now - st.pending_since < delay:
            return
    if st.pool or st.counters["poolChanges"]:
        st.joined.update((k, now) for k in wanted if k not in st.pool)
    st.pool = wanted
    st.pending_pool = None
    st.counters["poolChanges"] += 1
