from __future__ import annotations

import pytest

from lbconform.errors import UsageError
from lbconform_lab import topology as topo


def test_nodes_have_fabric_addresses_and_namespaces() -> None:
    n = topo.nodes(3)
    assert [x.name for x in n] == ["node-1", "node-2", "node-3"]
    assert [x.ip for x in n] == ["198.19.0.11", "198.19.0.12", "198.19.0.13"]
    assert n[0].netns == "lbc-node-1"
    assert all(len(x.fabric_port) <= 15 for x in topo.nodes(topo.MAX_NODES))


@pytest.mark.parametrize("bad", [0, -1, topo.MAX_NODES + 1])
def test_node_count_is_bounded(bad: int) -> None:
    with pytest.raises(UsageError, match="--nodes"):
        topo.nodes(bad)


@pytest.mark.parametrize("name", ["node-4", "node-0", "worker", "node-1x"])
def test_unknown_node_names_list_the_known_ones(name: str) -> None:
    with pytest.raises(UsageError, match="node-1, node-2, node-3"):
        topo.node_by_name(name, 3)


def test_pod_namespaces_are_prefixed_and_short() -> None:
    name = topo.pod_netns("3d8051fe-dd81-4c1e-9c2b-aaaaaaaaaaaa")
    assert name == "lbc-p-3d8051fedd81"
