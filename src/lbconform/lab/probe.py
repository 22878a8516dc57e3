"""Small HTTP checks against addresses that exist only inside the lab.

They run on a thread inside the right namespace (``nsexec``), so the caller's process
stays in the root namespace.
"""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

from lbconform.lab.nsexec import run_in_netns
from lbconform.lab.topology import CLIENT_NS
from lbconform.wait import WaitTimeout, poll_until


def http_status(netns: str | None, host: str, port: int, path: str, timeout: float = 2.0,
                tls: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET ``path`` and return (status, body); raises OSError when nothing answers."""

    def get() -> tuple[int, str]:
        conn: http.client.HTTPConnection
        if tls is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
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
    """New connections from the client to host:port until exactly ``backends`` have answered
    ``/hostname`` (an unknown name keeps the wait failing, and shows as the last value)."""
    seen: set[str] = set()

    def answered() -> bool:
        status, body = http_status(CLIENT_NS, host, port, "/hostname")
        if status == 200:
            seen.add(body.strip())
        return seen == backends

    try:
        poll_until(answered, timeout=timeout, interval=0.02, retry_on=(OSError,),
                   description=f"all {len(backends)} backends to answer through {host}:{port}")
    except WaitTimeout as exc:
        raise WaitTimeout(exc.description, exc.timeout, sorted(seen), exc.last_error) from None
