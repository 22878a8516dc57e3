"""The client side of every suite: one request on a new connection, from where the client is.

Against the lab the client is the lab's client namespace (the "internet" in front of the
VIPs): each call runs on a short-lived thread inside that namespace, so the test process
stays in the root namespace where the apiserver is. Against a real cluster the client is
this machine. Each answer carries the local address the connection left from, which is the
client's real address unless a NAT sits in between (then ``--client-address`` states it).
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lbconform.nsexec import run_in_netns
from lbconform.traffic import probe_ports

T = TypeVar("T")

#: agnhost netexec answers these paths (see the backend manifests).
HOSTNAME_PATH, CLIENT_IP_PATH = "/hostname", "/clientip"


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    local_address: str


#: A probe connection's last packet leaves within this many of its timeouts: the connect, the
#: answer's head and its body each have one.
PROBE_LIFETIMES = 3


class _FromProbePort(http.client.HTTPConnection):
    """A connection from the next probe port toward its destination (see ``probe_ports``): a
    port another socket holds (a listener, or this four-tuple still in TIME_WAIT) is skipped.
    SO_REUSEADDR lets the bind through a TIME_WAIT the kernel then refuses only for the same
    four-tuple."""

    def __init__(self, host: str, port: int, timeout: float, ports: probe_ports.ProbePorts) -> None:
        super().__init__(host, port, timeout=timeout)
        self.ports = ports

    def connect(self) -> None:
        lasts = PROBE_LIFETIMES * (self.timeout or 0.0)
        for attempt in range(1, probe_ports.ATTEMPTS + 1):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.settimeout(self.timeout)
                sock.bind(("", self.ports.take(self.host, self.port, lasts)))
                sock.connect((self.host, self.port))
            except OSError as exc:
                sock.close()
                if exc.errno not in probe_ports.BUSY or attempt == probe_ports.ATTEMPTS:
                    raise
                continue
            self.sock = sock
            return


@dataclass(frozen=True)
class Client:
    """Where traffic starts: ``netns`` None means this process's own network."""

    netns: str | None = None
    address: str | None = None
    timeout: float = 3.0

    def run(self, fn: Callable[[], T]) -> T:
        return run_in_netns(self.netns, fn) if self.netns else fn()

    def get(self, host: str, port: int, path: str = HOSTNAME_PATH, timeout: float | None = None,
            probe: bool = False) -> Answer:
        """GET ``path`` on a new connection; raises OSError when the connection fails. A ``probe``
        (a wait's connection, not a measured one) leaves from a port outside the kernel's
        ephemeral range: see ``probe_ports``."""
        ports = probe_ports.for_client(self.netns, self._ephemeral_range) if probe else None

        def call() -> Answer:
            wait = timeout or self.timeout
            conn = (_FromProbePort(host, port, wait, ports) if ports
                    else http.client.HTTPConnection(host, port, timeout=wait))
            try:
                conn.request("GET", path, headers={"Connection": "close"})
                local = conn.sock.getsockname()[0] if conn.sock else ""
                resp = conn.getresponse()
                return Answer(resp.status, resp.read(65536).decode(errors="replace").strip(), local)
            finally:
                conn.close()

        return self.run(call)

    def _ephemeral_range(self) -> str:
        def read() -> str:
            with open(probe_ports.EPHEMERAL_RANGE_FILE, encoding="ascii") as f:
                return f.read()

        return self.run(read)

    def backend(self, host: str, port: int, probe: bool = False) -> str:
        """The name of the backend that answers one new connection (agnhost ``/hostname``)."""
        answer = self.get(host, port, HOSTNAME_PATH, probe=probe)
        if answer.status != 200:
            raise OSError(f"{host}:{port}{HOSTNAME_PATH} answered {answer.status}")
        return answer.body

    def source_seen(self, host: str, port: int, probe: bool = False) -> tuple[str, str]:
        """(the address the backend saw, the address the client sent from)."""
        answer = self.get(host, port, CLIENT_IP_PATH, probe=probe)
        if answer.status != 200:
            raise OSError(f"{host}:{port}{CLIENT_IP_PATH} answered {answer.status}")
        seen = answer.body.rsplit(":", 1)[0].strip("[]")
        return seen, self.address or answer.local_address

    def address_toward(self, host: str, port: int) -> str:
        """The client's address as a backend should see it: ``address`` if stated, else the local
        address the kernel picks toward ``host`` (a UDP connect, which sends nothing)."""
        if self.address:
            return self.address

        def pick() -> str:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.connect((host, port))
                return str(sock.getsockname()[0])

        return self.run(pick)

    def udp_exchange(self, host: str, port: int, message: str, source_port: int = 0,
                     timeout: float | None = None) -> str:
        """Send one datagram (from a fixed source port when given) and return the answer.

        The socket is connected to ``host:port``: runs side by side may use one fixed source port
        from one client at the same time (SO_REUSEADDR lets each bind it), and the kernel gives an
        answer to the socket connected to its sender, where an unconnected one could get another
        run's answers and this one none."""

        def call() -> str:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(timeout or self.timeout)
                if source_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("", source_port))
                sock.connect((host, port))
                sock.send(message.encode())
                data = sock.recv(65536)
                return data.decode(errors="replace").strip()

        return self.run(call)
