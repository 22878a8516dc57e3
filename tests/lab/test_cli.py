"""The ``lbconform`` commands a user types against a running lab."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lbconform_lab import topology as topo
from lbconform_lab.cluster import Lab

pytestmark = pytest.mark.lab


def lbconform(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbconform.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_status_kubectl_and_exec(lab: Lab) -> None:
    status = lbconform("lab", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("etcd", "kube-apiserver", "lb", "agent-node-3"):
        assert f"{name} " in status.stdout
    assert "Ready=True" in status.stdout
    nodes = lbconform("lab", "kubectl", "get", "nodes", "-o", "name")
    assert nodes.stdout.split() == ["node/node-1", "node/node-2", "node/node-3"]
    addr = lbconform("lab", "exec", "--", "ip", "-o", "-4", "addr", "show", "dev", "eth0")
    assert f"{topo.CLIENT_IP}/24" in addr.stdout


def test_lb_state_and_defects_commands(lab: Lab) -> None:
    result = lbconform("lab", "lb", "defects", "--set", "no-affinity")
    assert result.stdout.strip() == "defects: no-affinity"
    result = lbconform("lab", "lb", "defects", "--set")
    assert result.stdout.strip() == "defects: none"
    bad = lbconform("lab", "lb", "defects", "--set", "no-such-defect")
    assert bad.returncode == 2 and "no-such-defect" in bad.stderr
    assert lbconform("lab", "lb", "state").returncode == 0
