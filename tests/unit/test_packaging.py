"""The wheel carries the product's data folders, so ``pip install lbconform`` alone runs everything."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: One file of each data folder the suites, experiments and reports need at run time.
EXPECTED = ("conftest.py", "suites/test_lifecycle.py", "suites/chaos/test_node_failure.py",
            "fixtures/harness.py", "fixtures/chaos.py", "manifests/backend-deployment.yaml",
            "manifests/locust-worker.yaml", "locustfiles/shapes.py", "experiments/node-kill.json",
            "reports/schema/conformance-report.v1alpha1.json")


def test_wheel_carries_the_data_folders(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "-q", "-w", str(tmp_path)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("lbconform-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in EXPECTED if f"lbconform/_data/{f}" not in names]
    assert not missing, missing
    assert not [n for n in names if "__pycache__" in n or n.startswith("lbconform/_data/tests/")]
    # What `lbconform lab build` compiles besides the upstream modules: the lab's kubelet API.
    assert "lbconform_lab/kubelet/main.go" in names
