"""``lbconform bench lab``: how long ``lab up`` takes with cached binaries, and how much
memory the running lab holds. A benchmark, never a pass/fail test: it prints figures and
their ratio to the aims (3 nodes Ready in 15 s, 1.5 GiB), and its last line holds them."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from lbconform.errors import LabError
from lbconform.lab import build
from lbconform.lab import netns as ns
from lbconform.lab.cluster import Lab

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
    groups: dict[str, float] = {}
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        groups[comm] = groups.get(comm, 0.0) + _rss_kib(pid) / 1024
    return groups


def bench_lab(nodes: int, rounds: int, say: Callable[[str], None]) -> int:
    lab = Lab(progress=lambda _msg: None)
    if lab.dir.exists():
        raise LabError("a lab is running: the benchmark boots its own; "
                       "take it down with 'lbconform lab down'")
    if not build.binaries_built():
        raise LabError("binaries are not built: run 'lbconform lab build' first "
                       "(the benchmark times a cached boot)")
    totals: list[float] = []
    phases: dict[str, list[float]] = {}
    rss: list[float] = []
    for i in range(rounds):
        report = lab.up(node_count=nodes)
        try:
            groups = lab_rss_mib(lab)
        finally:
            lab.down()
        totals.append(report.total)
        for k, v in report.phases.items():
            phases.setdefault(k, []).append(v)
        rss.append(sum(groups.values()))
        top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])[:6])
        print(f"round {i + 1}: boot {report.total:.2f}s, rss {rss[-1]:.0f} MiB ({top})")
    boot = statistics.median(totals)
    mem = statistics.median(rss)
    split = ", ".join(f"{k} {statistics.median(v):.2f}s" for k, v in phases.items())
    print(f"phases (median): {split}")
    print(f"lab bench: {nodes} nodes, {rounds} rounds: boot median {boot:.2f}s "
          f"({boot / AIM_BOOT_SECONDS:.2f} x the {AIM_BOOT_SECONDS:.0f}s aim), rss median {mem:.0f} MiB "
          f"({mem / AIM_RSS_MIB:.2f} x the {AIM_RSS_MIB:.0f} MiB aim)")
    return 0
