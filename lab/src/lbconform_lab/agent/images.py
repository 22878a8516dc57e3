"""Which container images the lab can run, and as which local program.

There are no container images in the lab: an image name maps to a program on this
machine. An image the lab does not know fails the pod with a reason that lists the ones it
does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lbconform_lab import build

AGNHOST_IMAGE = "registry.k8s.io/e2e-test-images/agnhost"
PAUSE_IMAGE = "registry.k8s.io/pause"
LOCUST_IMAGE = "docker.io/locustio/locust"
KUBECTL_IMAGE = "registry.k8s.io/kubectl"
#: Docker Hub's official Python image (the quiet backend's, manifests/backend-quiet-deployment.yaml):
#: the machine's own Python interpreter runs the program a pod names, from the pod's volumes.
PYTHON_IMAGE = "docker.io/library/python"
#: The interpreter's names in that image.
PYTHON_NAMES = ("python", "python3", "/usr/local/bin/python", "/usr/local/bin/python3")
#: Images whose entrypoint is one built binary (``lbconform lab build --with ...``), by
#: repository: the entrypoint's path in the image, and the binary. Any tag runs the build's
#: version, which the pod's imageID names.
ENTRYPOINT_IMAGES = {
    "quay.io/metallb/controller": ("/controller", "metallb-controller"),
    "quay.io/metallb/speaker": ("/speaker", "metallb-speaker"),
    "ghcr.io/kube-vip/kube-vip": ("/kube-vip", "kube-vip"),
    "ghcr.io/kube-vip/kube-vip-cloud-provider": ("/kube-vip-cloud-provider", "kube-vip-cloud-provider"),
}

KNOWN_IMAGES = (AGNHOST_IMAGE, PAUSE_IMAGE, LOCUST_IMAGE, KUBECTL_IMAGE, PYTHON_IMAGE, *ENTRYPOINT_IMAGES)


class UnknownImage(Exception):
    """The lab has no program for this image."""


@dataclass(frozen=True)
class Program:
    """A container's command line, resolved to local files."""

    argv: list[str]
    image_id: str


def _repository(image: str) -> str:
    """The image's repository without tag or digest, Docker Hub's short names spelled out
    (``python:3.13`` is ``docker.io/library/python``)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    parts = name.split("/")
    if len(parts) == 1 or (parts[0] in ("docker.io", "index.docker.io") and len(parts) == 2):
        return f"docker.io/library/{parts[-1]}"
    if parts[0] == "index.docker.io":
        return "docker.io/" + "/".join(parts[1:])
    if "." not in parts[0] and ":" not in parts[0] and parts[0] != "localhost":
        return f"docker.io/{name}"
    return name


def _python() -> str:
    """The machine's Python interpreter (not a virtualenv's, whose packages a pod must not see)."""
    return os.path.realpath(sys.executable)


def _agnhost() -> str:
    return str(build.binary("agnhost"))


def resolve(image: str, command: Sequence[str], args: Sequence[str]) -> Program:
    """Map a container's image, command and args to a local argv, as the image would run it."""
    repo = _repository(image)
    if repo == AGNHOST_IMAGE:
        # The image's entrypoint is /agnhost; a command may name it explicitly.
        argv = [*command, *args] if command else ["/agnhost", *args]
        return Program(command_argv(argv), f"lab://agnhost@{_agnhost()}")
    if repo == PAUSE_IMAGE:
        return Program([_agnhost(), "pause"], "lab://pause")
    if repo == LOCUST_IMAGE:
        locust = str(Path(sys.executable).with_name("locust"))
        argv = [*command, *args] if command else ["locust", *args]
        if argv[0] in ("locust", "/usr/local/bin/locust"):
            argv[0] = locust
        return Program(argv, f"lab://locust@{locust}")
    if repo == PYTHON_IMAGE:
        # The image's entrypoint is python3: a command replaces it.
        python = _python()
        argv = [*command, *args] if command else ["python3", *args]
        if argv[0] in PYTHON_NAMES:
            argv[0] = python
        return Program(argv, f"lab://python@{python}")
    if repo == KUBECTL_IMAGE:
        # The image's entrypoint is kubectl: args alone are kubectl's, a command replaces it.
        kubectl = str(build.binary("kubectl"))
        argv = [*command, *args] if command else [kubectl, *args]
        if argv[0] in ("kubectl", "/bin/kubectl", "/usr/local/bin/kubectl"):
            argv[0] = kubectl
        return Program(argv, f"lab://kubectl@{kubectl}")
    if repo in ENTRYPOINT_IMAGES:
        entrypoint, name = ENTRYPOINT_IMAGES[repo]
        binary = str(build.binary(name))
        argv = [*command, *args] if command else [binary, *args]
        if argv[0] == entrypoint:
            argv[0] = binary
        return Program(argv, f"lab://{name}@{binary}")
    raise UnknownImage(
        f"the lab cannot run image {image!r}: it runs {', '.join(KNOWN_IMAGES)}"
    )


def command_argv(argv: Sequence[str]) -> list[str]:
    """A command as a container would exec it: /agnhost is the built agnhost, the rest is local."""
    out = list(argv)
    if out and out[0] in ("/agnhost", "agnhost"):
        out[0] = _agnhost()
    return out
