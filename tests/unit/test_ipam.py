"""The lab agent's pod IPAM: round-robin like the host-local CNI plugin, so a freed address
is not handed out again at once."""

from __future__ import annotations

import pytest

from lbconform_lab.agent.ipam import PodIPAM


def test_a_freed_address_is_not_given_to_the_next_pod() -> None:
    ipam = PodIPAM("100.64.2.0/24")
    first, second = ipam.allocate(), ipam.allocate()
    assert (first, second) == ("100.64.2.2", "100.64.2.3")
    ipam.release(first)
    assert ipam.allocate() == "100.64.2.4"


def test_addresses_wrap_around_and_skip_those_in_use() -> None:
    ipam = PodIPAM("100.64.2.0/29")  # .2 to .6
    given = [ipam.allocate() for _ in range(5)]
    assert given == [f"100.64.2.{i}" for i in range(2, 7)]
    ipam.release("100.64.2.4")
    assert ipam.allocate() == "100.64.2.4"
    with pytest.raises(RuntimeError, match="exhausted"):
        ipam.allocate()


def test_a_pod_made_again_gets_its_previous_address_back() -> None:
    ipam = PodIPAM("100.64.2.0/24")
    assert ipam.allocate("100.64.2.57") == "100.64.2.57"   # its status names it: a restarted node
    assert ipam.allocate() == "100.64.2.2"
    assert ipam.allocate("100.64.2.2") == "100.64.2.3"      # taken: the next free one
    assert ipam.allocate("10.0.0.9") == "100.64.2.4"        # not this node's CIDR
