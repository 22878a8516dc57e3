"""Where the product's data folders are: manifests/, suites/, locustfiles/, experiments/.

In a checkout they are the top-level folders, used in place.
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def data_dir(name: str) -> Path:
    path = _CHECKOUT / name
    if not path.is_dir():
        raise FileNotFoundError(f"lbconform's {name}/ folder is missing (looked in {path})")
    return path


def experiments_dir() -> Path:
    """The chaostoolkit experiments (``experiments/*.json``)."""
    return data_dir("experiments")
