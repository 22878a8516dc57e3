from __future__ import annotations

import os
import re
import subprocess
import sys

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


@pytest.mark.parametrize(("value", "instance"), [(None, 1), ("", 1), ("1", 1), ("2", 2), ("9", 9)])
def test_the_instance_is_the_environments_or_the_first(value: str | None, instance: int) -> None:
    assert topo.parse_instance(value) == instance


@pytest.mark.parametrize("value", ["0", "10", "x", "-1", " 2", "2.0"])
def test_a_bad_instance_is_one_line_naming_the_variable(value: str) -> None:
    with pytest.raises(UsageError, match=rf"^LBCONFORM_LAB_INSTANCE={re.escape(repr(value))} names no lab: "):
        topo.parse_instance(value)


def test_a_second_instance_has_its_own_names_directory_and_port() -> None:
    """What a process of lab 2 calls things (the module reads the environment once, on import)."""
    code = ("from lbconform_lab import topology as t, state, cluster;"
            "print(t.CLIENT_NS, t.Node(1).netns, t.pod_netns('ab'), state.default_lab_dir(),"
            " cluster.DEFAULT_API_PORT)")
    env = {k: v for k, v in os.environ.items() if k != "LBCONFORM_LAB_DIR"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "LBCONFORM_LAB_INSTANCE": "2"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["lbc2-client", "lbc2-node-1", "lbc2-p-ab", "/run/lbconform/lab2", "16444"]
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert first == ["lbc-client", "lbc-node-1", "lbc-p-ab", "/run/lbconform/lab", "16443"]


def test_a_lab_of_a_bad_instance_is_refused_before_anything() -> None:
    code = "from lbconform_lab.cluster import Lab; Lab()"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LBCONFORM_LAB_INSTANCE": "x"},
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "LBCONFORM_LAB_INSTANCE='x' names no lab" in result.stderr


def test_a_lab_directory_in_a_processs_arguments_is_found_by_its_instances_name() -> None:
    args = f"kubectl --kubeconfig {topo.lab_dir(2)}/kubeconfig logs -f x --dir={topo.lab_dir(1)}"
    assert [m.group(0) for m in topo.LAB_DIR_PATTERN.finditer(args)] == [topo.lab_dir(2), topo.lab_dir(1)]
    assert not topo.LAB_DIR_PATTERN.search(f"{topo.lab_dir(1)}x/kubeconfig")
