"""``lbconform bench lab``: how long ``lab up`` takes with cached binaries, and how much
memory the running lab holds. A benchmark, never a pass/fail test: it prints figures and
their ratio to the aims (3 nodes Ready in 15 s, 1.5 GiB), and its last line holds them.
A real-node lab's memory is its processes' and everything in its nodes' cgroups (the kubelet,
containerd, the shims and the pods' containers)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from lbconform.errors import LabError, UsageError
from lbconform_lab import build, machine
from lbconform_lab import netns as ns
from lbconform_lab import topology as topo
from lbconform_lab.cluster import AGENT, CONTAINERD, LBS, REFERENCE_LB, Lab, check_node_runtime

AIM_BOOT_SECONDS = 15.0
AIM_RSS_MIB = 1536.0


def _rss_kib(pid: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def lab_rss_mib(lab: Lab) -> dict[str, float]:
    """Resident memory of every process of the lab, grouped by program."""
    state = lab.dir.read()
    pids: dict[str, str] = {}
    for netns in [*state.namespaces, *lab.dir.recorded_sandboxes()]:
        for pid in ns.pids_in(netns):
            pids[pid] = netns
    for p in state.processes.values():
        pids[str(p.pid)] = "root"
    if state.node_runtime == CONTAINERD:
        for node in topo.nodes(state.nodes):
            pids.update((str(pid), node.name) for pid in machine.pids_in(machine.node_cgroup(node)))
    groups: dict[str, float] = {}
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        groups[comm] = groups.get(comm, 0.0) + _rss_kib(pid) / 1024
    return groups


def _rounds(lab: Lab, nodes: int, rounds: int, lb: str, node_runtime: str = AGENT) -> tuple[float, float]:
    """Boot and measure ``rounds`` labs running ``lb`` on ``node_runtime``'s nodes; prints each
    round, returns the medians of boot seconds and resident MiB."""
    name = lb if node_runtime == AGENT else f"{lb}, {node_runtime} nodes"
    totals: list[float] = []
    phases: dict[str, list[float]] = {}
    rss: list[float] = []
    for i in range(rounds):
        report = lab.up(node_count=nodes, lb=lb, node_runtime=node_runtime)
        try:
            groups = lab_rss_mib(lab)
        finally:
            lab.down()
        totals.append(report.total)
        for k, v in report.phases.items():
            phases.setdefault(k, []).append(v)
        rss.append(sum(groups.values()))
        top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])[:6])
        print(f"{name} round {i + 1}: boot {report.total:.2f}s, rss {rss[-1]:.0f} MiB ({top})")
    split = ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in phases.items())
    print(f"{name} phases (median): {split}")
    return statistics.median(totals), statistics.median(rss)


def bench_lab(nodes: int, rounds: int, say: Callable[[str], None], lb: str = REFERENCE_LB,
              node_runtime: str = AGENT) -> int:
    """Boot time and memory of the lab; with ``lb`` other than the reference LB, or real nodes
    (``node_runtime`` containerd), of that lab beside the reference-LB lab on imitated nodes,
    measured in the same run just before it."""
    lab = Lab(progress=lambda _msg: None)
    if lab.dir.exists():
        raise LabError("a lab is running: the benchmark boots its own; "
                       "take it down with 'lbconform lab down'")
    if not build.binaries_built():
        raise LabError("binaries are not built: run 'lbconform lab build' first "
                       "(the benchmark times a cached boot)")
    if lb not in LBS:
        raise UsageError(f"--lb {lb!r}: the lab's load balancers are {', '.join(LBS)}")
    if lb != REFERENCE_LB and not build.optional_built(lb):
        raise LabError(f"{lb} is not built: run 'lbconform lab build --with {lb}' first")
    check_node_runtime(node_runtime)
    boot, mem = _rounds(lab, nodes, rounds, REFERENCE_LB)
    print(f"lab bench: {nodes} nodes, {rounds} rounds: boot median {boot:.2f}s "
          f"({boot / AIM_BOOT_SECONDS:.2f} x the {AIM_BOOT_SECONDS:.0f}s aim), rss median {mem:.0f} MiB "
          f"({mem / AIM_RSS_MIB:.2f} x the {AIM_RSS_MIB:.0f} MiB aim)")
    if lb != REFERENCE_LB or node_runtime != AGENT:
        other_boot, other_mem = _rounds(lab, nodes, rounds, lb, node_runtime)
        flags = " ".join([*([f"--lb {lb}"] if lb != REFERENCE_LB else []),
                          *([f"--node-runtime {node_runtime}"] if node_runtime != AGENT else [])])
        print(f"lab bench {flags}: {nodes} nodes, {rounds} rounds: boot median {other_boot:.2f}s "
              f"({other_boot / boot:.2f} x the reference-LB lab, {other_boot / AIM_BOOT_SECONDS:.2f} x the "
              f"aim), rss median {other_mem:.0f} MiB ({other_mem / mem:.2f} x the reference-LB lab, "
              f"{other_mem / AIM_RSS_MIB:.2f} x the aim)")
    return 0
