"""Reading the node agents' records of the pod namespaces they made."""

from __future__ import annotations

from lbconform.lab.state import LabDir


def sandboxes_of(labdir: LabDir, node: str | None = None) -> list[str]:
    """Pod namespaces recorded by one node's agent, or by all of them."""
    base = labdir.root / "nodes"
    pattern = f"{node}/sandboxes/*" if node else "*/sandboxes/*"
    return sorted(p.name for p in base.glob(pattern)) if base.is_dir() else []
