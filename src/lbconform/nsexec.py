"""Running Python code, and programs, inside a network namespace, from any process.

Linux's setns(2) moves only the calling *thread* into a network namespace, so a short-lived
thread that enters the namespace can open sockets there while the rest of the process stays
where it is. Python 3.11 has no ``os.setns``, hence ctypes. This is how the harness talks to
addresses that exist only inside the lab, without changing the root namespace.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from lbconform.errors import LabError

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/var/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def netns_exists(netns: str) -> bool:
    """Whether a named network namespace (``ip netns add``) exists on this machine."""
    return os.path.exists(os.path.join(NETNS_RUN_DIR, netns))


def enter(netns: str) -> None:
    """Move the calling thread into ``netns``."""
    path = os.path.join(NETNS_RUN_DIR, netns)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LabError(f"network namespace {netns} does not exist: is the lab up?") from None
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise LabError(f"cannot enter network namespace {netns}: {os.strerror(err)} (needs root)")
    finally:
        os.close(fd)


def run_in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` on a thread inside ``netns`` and return its result (or raise its error)."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            enter(netns)
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    """argv that runs inside a lab network namespace, in the caller's mount namespace.

    Not ``ip netns exec``: that also enters a mount namespace of its own, and a namespace
    the program then adds (a node agent adding a pod's) would be mounted where no one
    else, ``lab down`` included, can see it. nsenter execs in place, so the pid is kept.
    """
    return ["nsenter", f"--net={NETNS_RUN_DIR}/{netns}", "--", *argv] if netns else list(argv)
