"""Two distributions: the harness's wheel carries the product's data folders, so ``pip install
lbconform`` alone runs everything against any kubeconfig, and holds nothing of the lab; the lab's
wheel carries the lab, its Go sources and its dependencies, and plugs into the harness through
entry points."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: One file of each data folder the suites, experiments and reports need at run time.
EXPECTED = ("conftest.py", "suites/test_lifecycle.py", "suites/chaos/test_node_failure.py",
            "fixtures/harness.py", "fixtures/chaos.py", "manifests/backend-deployment.yaml",
            "manifests/locust-worker.yaml", "locustfiles/shapes.py", "experiments/node-kill.json",
            "reports/schema/conformance-report.v1alpha1.json")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    for source in (ROOT, ROOT / "lab"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                        "-q", "-w", str(out)], check=True, capture_output=True, timeout=300)
    return {"harness": zipfile.ZipFile(next(out.glob("lbconform-*.whl"))),
            "lab": zipfile.ZipFile(next(out.glob("lbconform_lab-*.whl")))}


def metadata(wheel: zipfile.ZipFile, name: str) -> str:
    return wheel.read(next(n for n in wheel.namelist() if n.endswith(f".dist-info/{name}"))).decode()


def test_the_harness_wheel_carries_the_data_folders(wheels: dict[str, zipfile.ZipFile]) -> None:
    names = set(wheels["harness"].namelist())
    missing = [f for f in EXPECTED if f"lbconform/_data/{f}" not in names]
    assert not missing, missing
    assert not [n for n in names if "__pycache__" in n or n.startswith("lbconform/_data/tests/")]


def test_the_harness_wheel_holds_nothing_of_the_lab(wheels: dict[str, zipfile.ZipFile]) -> None:
    names = wheels["harness"].namelist()
    lab = [n for n in names if n.startswith("lbconform_lab/") or "/lab/" in n or n.endswith(".go")]
    assert not lab, lab
    requires = [line for line in metadata(wheels["harness"], "METADATA").splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [r for r in requires if "cryptography" in r or "lbconform-lab" in r], requires
    assert "lbconform_lab" not in metadata(wheels["harness"], "entry_points.txt")


def test_the_lab_wheel_plugs_into_the_harness(wheels: dict[str, zipfile.ZipFile]) -> None:
    names = set(wheels["lab"].namelist())
    # What `lbconform lab build` compiles besides the upstream modules: the lab's kubelet API.
    assert "lbconform_lab/kubelet/main.go" in names
    # What `lbconform lab up` applies for the reference LB's BackendPool objects.
    assert "lbconform_lab/lb/backendpool-crd.yaml" in names
    assert not [n for n in names if n.startswith("lbconform/")]
    entry_points = metadata(wheels["lab"], "entry_points.txt")
    for group, value in (("lbconform.providers", "lab = lbconform_lab.provider:LabProvider"),
                         ("lbconform.local_clusters", "lab = lbconform_lab.local:LabCluster"),
                         ("lbconform.commands", "lab = lbconform_lab.cli:LabCommands")):
        assert f"[{group}]\n{value}" in entry_points, group
    requires = metadata(wheels["lab"], "METADATA")
    assert "Requires-Dist: lbconform==" in requires and "Requires-Dist: cryptography" in requires
