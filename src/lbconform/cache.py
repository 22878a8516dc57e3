"""Where lbconform keeps what it builds or installs outside the repository: ``$LBCONFORM_CACHE``,
else ``~/.cache/lbconform``. The harness keeps the Allure CLI there and the lab its binaries, so
both read the one location from here."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$LBCONFORM_CACHE`` or ~/.cache/lbconform."""
    env = os.environ.get("LBCONFORM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lbconform"
