"""Small HTTP checks against addresses that exist only inside the lab.

They run on a thread inside the right namespace (``nsexec``), so the caller's process
stays in the root namespace.
"""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

from lbconform.nsexec import run_in_netns
from lbconform_lab.topology import CLIENT_NS


def http_status(netns: str | None, host: str, port: int, path: str, timeout: float = 2.0,
                tls: ssl.SSLContext | None = None, source_port: int = 0) -> tuple[int, str]:
    """GET ``path`` and return (status, body), from ``source_port`` if given (else one the kernel
    picks); raises OSError when nothing answers."""
    source = ("", source_port) if source_port else None

    def get() -> tuple[int, str]:
        conn: http.client.HTTPConnection
        if tls is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls,
                                               source_address=source)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=source)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read(65536).decode(errors="replace")
        finally:
            conn.close()

    return run_in_netns(netns, get) if netns else get()


def client_tls(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def wait_for_all_backends(host: str, port: int, backends: set[str], timeout: float) -> None:
    """New connections from the lab's client until exactly ``backends`` have answered."""
    from lbconform.traffic.checks import wait_for_backends
    from lbconform.traffic.client import Client

    wait_for_backends(Client(CLIENT_NS), host, port, backends, timeout)
