"""A UDP flow with a fixed source port, asking agnhost's UDP server which pod answers.

UDP has no connection to reset: what breaks is a flow whose conntrack entries (in the LB or
in kube-proxy's nodes) still point at a server that is gone. The flow keeps its 5-tuple, so
every datagram it sends takes whatever path those entries give it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbconform.traffic.checks import SUCCESSES
from lbconform.traffic.client import Client
from lbconform.wait import LbWaitTimeout, WaitTimeout, await_convergence, poll_until

#: agnhost netexec's UDP server answers this command with the pod's hostname.
HOSTNAME = "hostname"
#: How long a datagram waits for its answer before it counts as unanswered, in ``wait_for_silence``
#: (a served flow answers within milliseconds on the lab and within the request timeout anywhere).
SILENT_AFTER_SECONDS = 1.0


@dataclass
class UdpFlow:
    client: Client
    host: str
    port: int
    source_port: int
    timeout: float

    def ask(self) -> str:
        return self.client.udp_exchange(self.host, self.port, HOSTNAME, self.source_port, self.timeout)

    def wait_for_server(self, names: set[str], timeout: float) -> str:
        """Ask until one of ``names`` answers; returns it. Lost datagrams count as not yet."""
        seen: list[str] = []

        def answered() -> str | None:
            answer = self.ask()
            seen[:] = [answer]
            return answer if answer in names else None

        try:
            return poll_until(answered, timeout=timeout, interval=0.2, retry_on=(OSError,),
                              timeout_error=LbWaitTimeout,
                              description=f"the UDP flow from port {self.source_port} to "
                                          f"{self.host}:{self.port} to reach one of {sorted(names)}")
        except WaitTimeout as exc:
            raise type(exc)(exc.description, exc.timeout, seen, exc.last_error) from None

    def wait_for_silence(self, timeout: float) -> None:
        """Ask until ``SUCCESSES`` datagrams in a row get no answer within ``SILENT_AFTER_SECONDS``
        (from source port 0, each datagram is a new flow)."""
        seen: list[str] = []

        def unanswered() -> bool:
            try:
                seen[:] = [self.client.udp_exchange(self.host, self.port, HOSTNAME, self.source_port,
                                                    SILENT_AFTER_SECONDS)]
            except OSError:
                return True
            return False

        try:
            await_convergence(unanswered, successes=SUCCESSES, timeout=timeout, timeout_error=LbWaitTimeout,
                              description=f"the UDP flow from port {self.source_port} to {self.host}:"
                                          f"{self.port} to get no answer")
        except WaitTimeout as exc:
            last = {"last answered by": seen}
            raise type(exc)(exc.description, exc.timeout, last, exc.last_error) from None
