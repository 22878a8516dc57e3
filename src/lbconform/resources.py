"""Where the product's data folders are: manifests/, suites/, fixtures/, locustfiles/,
experiments/, reports/schema/.

In a checkout (and an editable install) they are the top-level folders, used in place; an
installed wheel carries copies under ``lbconform/_data`` (setup.py puts them there).
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
_INSTALLED = Path(__file__).resolve().parent / "_data"


def _base() -> Path:
    """The checkout when this module runs from one (its src/ layout), else the wheel's copy."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "src" / "lbconform").is_dir():
        return _CHECKOUT
    return _INSTALLED


def data_dir(name: str) -> Path:
    path = _base() / name
    if not path.is_dir():
        raise FileNotFoundError(f"lbconform's {name}/ folder is missing (looked in {path})")
    return path


def experiments_dir() -> Path:
    """The chaostoolkit experiments (``experiments/*.json``)."""
    return data_dir("experiments")
