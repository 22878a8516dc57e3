"""Network namespaces, links, addresses, routes and sysctls, through iproute2.

Every operation names its namespace explicitly (``ip -n NS``), so nothing here ever
touches the root namespace's configuration.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from lbconform.errors import LabError
from lbconform.wait import poll_until

#: SIGKILLed processes are gone within milliseconds; this only bounds a stuck exit.
KILL_TIMEOUT_SECONDS = 10.0


def run(argv: Sequence[str], *, check: bool = True, input_text: str | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=input_text, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"'{' '.join(argv)}' failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def ip(netns: str, *args: str, check: bool = True) -> str:
    return run(["ip", "-n", netns, *args], check=check)


def list_netns() -> set[str]:
    out = run(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def add_netns(name: str) -> None:
    run(["ip", "netns", "add", name])
    ip(name, "link", "set", "lo", "up")


def del_netns(name: str) -> None:
    run(["ip", "netns", "del", name], check=False)


def router_sysctls(netns: str) -> None:
    """Forwarding on, reverse-path filtering off on every link, present and future.

    The lab routes asymmetric paths on purpose (client in through the LB, replies straight
    from a node), which strict reverse-path filtering would drop.
    """
    run(["ip", "netns", "exec", netns, "sh", "-ec",
         "echo 1 > /proc/sys/net/ipv4/ip_forward; "
         "for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > $f; done"])


def veth(a_ns: str, a_name: str, b_ns: str, b_name: str) -> None:
    """A veth pair with one end in each namespace, both up."""
    ip(a_ns, "link", "add", a_name, "type", "veth", "peer", "name", b_name, "netns", b_ns)
    ip(a_ns, "link", "set", a_name, "up")
    ip(b_ns, "link", "set", b_name, "up")


def addr(netns: str, dev: str, cidr: str) -> None:
    ip(netns, "addr", "add", cidr, "dev", dev)


def route_replace(netns: str, *spec: str) -> None:
    ip(netns, "route", "replace", *spec)


def link_state(netns: str, dev: str, up: bool) -> None:
    ip(netns, "link", "set", dev, "up" if up else "down")


def pids_in(netns: str) -> list[str]:
    return [p for p in run(["ip", "netns", "pids", netns], check=False).split() if p.isdigit()]


def kill_processes(netns: str, timeout: float = KILL_TIMEOUT_SECONDS) -> None:
    """SIGKILL every process inside a lab namespace (the lab started all of them) and wait
    until they are gone, so that the namespace is really freed when it is deleted."""
    if not pids_in(netns):
        return
    run(["kill", "-9", *pids_in(netns)], check=False)
    poll_until(lambda: not pids_in(netns), timeout=timeout, interval=0.02,
               description=f"the processes in {netns} to exit after SIGKILL")
