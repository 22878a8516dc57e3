"""The lab's names and addresses: which namespace is which, and who has which IP.

Pure data, no side effects: everything else asks this module rather than spelling an
address or a namespace name itself. Address plan (DESIGN.md): clients 203.0.113.0/24,
VIPs 198.18.0.0/24, node fabric 198.19.0.0/24, pods 100.64.0.0/16, services 10.96.0.0/16.

Several labs run side by side on one machine, each its own: ``$LBCONFORM_LAB_INSTANCE`` (1 to
9; 1 when unset) names the lab a process works with, and every process it starts inherits it.
What a lab has on the machine carries its instance: its namespaces' prefix (``lbc-`` for the
first, ``lbc2-`` for the second), its directory and its apiserver's loopback port. The addresses
are the same in every lab: they live only inside its namespaces, and no route leaves a lab.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Final

from lbconform.errors import UsageError

INSTANCE_ENV: Final = "LBCONFORM_LAB_INSTANCE"
MAX_INSTANCES: Final = 9


def parse_instance(value: str | None) -> int:
    """The lab instance ``value`` names (unset or empty: the first)."""
    if not value:
        return 1
    if not (value.isdigit() and 1 <= int(value) <= MAX_INSTANCES):
        raise UsageError(f"{INSTANCE_ENV}={value!r} names no lab: give a number from 1 to {MAX_INSTANCES}, "
                         "or unset it for the first lab")
    return int(value)


def _this_instance() -> tuple[int, str]:
    try:
        return parse_instance(os.environ.get(INSTANCE_ENV)), ""
    except UsageError as e:
        return 0, str(e)


#: This process's lab; 0 (and its error) when the environment names none. Every way to a lab
#: goes through ``check_instance`` (``Lab`` does), so a bad value is one line, never another lab.
INSTANCE, _INSTANCE_ERROR = _this_instance()


def check_instance() -> int:
    """This process's lab instance, or the one-line error of a bad ``$LBCONFORM_LAB_INSTANCE``."""
    if _INSTANCE_ERROR:
        raise UsageError(_INSTANCE_ERROR)
    return INSTANCE


PREFIX: Final = "lbc-" if INSTANCE == 1 else f"lbc{INSTANCE}-"
#: Where every instance's lab directory is, unless told otherwise (``lab_dir``).
LABS_ROOT: Final = "/run/lbconform"


def lab_dir(instance: int) -> str:
    """Lab ``instance``'s directory, unless told otherwise: ``lab`` for the first, ``labN`` after."""
    return f"{LABS_ROOT}/lab" + ("" if instance == 1 else str(instance))


#: A lab directory as ``lab_dir`` names it, in a process's arguments.
LAB_DIR_PATTERN: Final = re.compile(re.escape(LABS_ROOT) + r"/lab\d*(?=/|\s|$)")

#: The instance's lab directory and apiserver port, unless told otherwise.
DEFAULT_LAB_DIR: Final = lab_dir(INSTANCE)
DEFAULT_API_PORT: Final = 16443 + max(INSTANCE, 1) - 1

FABRIC_NS: Final = PREFIX + "fabric"
LB_NS: Final = PREFIX + "lb"
CLIENT_NS: Final = PREFIX + "client"

FABRIC_BRIDGE: Final = "fabric0"
FABRIC_CIDR: Final = "198.19.0.0/24"
FABRIC_PREFIXLEN: Final = 24
#: The control plane lives on the fabric bridge's own address.
APISERVER_IP: Final = "198.19.0.1"
APISERVER_PORT: Final = 6443
#: The LB namespace's leg on the fabric: nodes route the client range back through it.
LB_FABRIC_IP: Final = "198.19.0.2"

CLIENT_CIDR: Final = "203.0.113.0/24"
LB_CLIENT_IP: Final = "203.0.113.1"
CLIENT_IP: Final = "203.0.113.10"

VIP_CIDR: Final = "198.18.0.0/24"
#: The VIPs held for Services that ask for an address (``spec.loadBalancerIP``, MetalLB's
#: annotation): no LB in the lab hands them out unasked, as a cloud keeps reserved static IPs.
REQUEST_RANGE: Final = "198.18.0.240-198.18.0.254"


def request_range() -> list[str]:
    """Every address of ``REQUEST_RANGE``."""
    first, last = (ipaddress.IPv4Address(a) for a in REQUEST_RANGE.split("-"))
    return [str(ipaddress.IPv4Address(i)) for i in range(int(first), int(last) + 1)]
POD_CIDR: Final = "100.64.0.0/16"
NODE_CIDR_MASK: Final = 24
SERVICE_CIDR: Final = "10.96.0.0/16"
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"

#: Pods reach their node through this link-local next hop, answered by proxy ARP.
POD_GATEWAY: Final = "169.254.1.1"

MAX_NODES: Final = 20
_NODE_NAME = re.compile(r"node-(\d+)")


@dataclass(frozen=True)
class Node:
    """One lab node: a network namespace with kube-proxy and the node agent."""

    index: int

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def ip(self) -> str:
        return f"198.19.0.{10 + self.index}"

    @property
    def fabric_port(self) -> str:
        """The node's veth end on the fabric bridge (in the fabric namespace)."""
        return f"fab-n{self.index}"


def nodes(count: int) -> list[Node]:
    if not 1 <= count <= MAX_NODES:
        raise UsageError(f"--nodes must be between 1 and {MAX_NODES}, not {count}")
    return [Node(i) for i in range(1, count + 1)]


def node_by_name(name: str, count: int) -> Node:
    match = _NODE_NAME.fullmatch(name)
    if match is None or not 1 <= int(match.group(1)) <= count:
        known = ", ".join(n.name for n in nodes(count))
        raise UsageError(f"no lab node named {name!r}: the lab has {known}")
    return Node(int(match.group(1)))


def pod_netns(pod_uid: str) -> str:
    return f"{PREFIX}p-{pod_uid.replace('-', '')[:12]}"
