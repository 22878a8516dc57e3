"""Where the locustfiles are, and which one a name means.

The locustfiles are product data, like manifests/: the top-level ``locustfiles/`` folder of
a checkout (``lbconform.resources.data_dir``). A spec names one by its stem
(``"http_keepalive"``) or gives any path; both must exist before a process is started, so
that a typo is one clear line instead of Locust's usage text.
"""

from __future__ import annotations

from pathlib import Path

from lbconform.errors import LoadError
from lbconform.resources import data_dir

HTTP_NEW_CONNECTION = "http_new_connection"
HTTP_KEEPALIVE = "http_keepalive"
TCP_LONG_LIVED = "tcp_long_lived"
#: The load shape (ramp, hold, chaos window); loaded next to a user's locustfile.
SHAPES = "shapes"
#: The ConfigMap that carries the locustfiles to worker pods, and where manifests/locust-worker.yaml
#: mounts it (the locustfiles import lbconform_locust.py beside them, so the folder goes whole).
CONFIG_MAP = "lbconform-locustfiles"
MOUNT_PATH = "/lbconform/locustfiles"

__all__ = ["CONFIG_MAP", "HTTP_KEEPALIVE", "HTTP_NEW_CONNECTION", "MOUNT_PATH", "SHAPES", "TCP_LONG_LIVED",
           "config_map", "locustfile", "locustfiles_dir", "mounted"]


def locustfiles_dir() -> Path:
    try:
        return data_dir("locustfiles")
    except FileNotFoundError as exc:
        raise LoadError(str(exc)) from None


def locustfile(name: str | Path) -> Path:
    """The file a name means: a stem in locustfiles/ (``.py`` may be left off), or a path."""
    text = str(name)
    stem_file = text if text.endswith(".py") else f"{text}.py"
    path = Path(text) if "/" in text else locustfiles_dir() / stem_file
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in locustfiles_dir().glob("*.py")))
        raise LoadError(f"locustfile {path} does not exist (locustfiles/ holds: {known})")
    return path.resolve()


def config_map() -> dict[str, object]:
    """The ConfigMap of every locustfile, by file name, as ``kubectl create configmap
    lbconform-locustfiles --from-file=locustfiles/`` makes it."""
    files = {p.name: p.read_text() for p in sorted(locustfiles_dir().glob("*.py"))}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP}, "data": files}


def mounted(name: str) -> str:
    """Where a worker pod finds the locustfile ``name`` means (one of locustfiles/)."""
    path = locustfile(name)
    if path.parent != locustfiles_dir().resolve():
        raise LoadError(f"locustfile {path}: worker pods run only the locustfiles of locustfiles/")
    return f"{MOUNT_PATH}/{path.name}"
