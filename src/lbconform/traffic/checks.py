"""Traffic checks that converge: which backends answer through an address, from the client.

A check holds only when it held for several new connections in a row (or once every wanted
backend answered); one lucky answer proves nothing. Waits name what they awaited and say
what they saw last.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from lbconform.traffic.client import Client
from lbconform.wait import LbWaitTimeout, WaitTimeout, await_convergence, poll_until

#: Consecutive successes that make a traffic check hold.
SUCCESSES = 3
#: Answers in a row from the wanted backends that settle a wait once another backend answered:
#: an LB sending one connection in three elsewhere passes twenty in a row once in 3**20 tries.
SETTLED = 20


def converge(holds: Callable[[], bool], description: str, timeout: float, last: object,
              interval: float = 0.1) -> None:
    """``holds`` holds ``SUCCESSES`` times in a row within ``timeout``; a timeout carries ``last``
    (what the wait saw last, filled in by ``holds``)."""
    try:
        await_convergence(holds, successes=SUCCESSES, timeout=timeout, interval=interval,
                          timeout_error=LbWaitTimeout, description=description)
    except WaitTimeout as exc:
        raise type(exc)(exc.description, exc.timeout, last, exc.last_error) from None


def wait_for_backends(client: Client, host: str, port: int, want: set[str], timeout: float,
                      reread: Callable[[], set[str]] | None = None) -> None:
    """New connections until exactly ``want`` have answered ``/hostname``. An answer from a
    backend outside ``want`` starts the count again, and from then on the wait also needs
    ``SETTLED`` answers in a row from ``want``: a change still propagating (a policy switch, an
    announcer moving) settles, while an LB that keeps sending some connections elsewhere does
    not. With ``reread``, an outsider's answer reads ``want`` again first (where it follows the
    implementation's own view, which may have moved meanwhile). The outsider shows in the last
    value."""
    seen: set[str] = set()
    since_stray: list[str] = []  # the answers since the last outsider
    strayed = False

    def answered() -> bool:
        nonlocal strayed, want
        backend = client.backend(host, port, probe=True)
        seen.add(backend)
        if backend not in want:
            strayed = True
            since_stray.clear()
            if reread is None:
                return False
            want = reread()
            if backend not in want:
                return False
        since_stray.append(backend)
        return set(since_stray) == want and (not strayed or len(since_stray) >= SETTLED)

    try:
        poll_until(answered, timeout=timeout, interval=0.02, retry_on=(OSError,),
                   timeout_error=LbWaitTimeout,
                   description=f"all {len(want)} backends to answer through {host}:{port}")
    except WaitTimeout as exc:
        raise type(exc)(exc.description, exc.timeout, sorted(seen), exc.last_error) from None


def wait_for_reachable(client: Client, host: str, port: int, backends: set[str], timeout: float) -> None:
    """``SUCCESSES`` new connections in a row are answered by backends among ``backends`` (not
    all of them: under ClientIP affinity one answers). An address that a deleted Service held a
    moment ago still reaches that Service's backends until every kube-proxy has caught up, and
    an answer from them is not this Service serving."""
    last: list[str] = []

    def ours() -> bool:
        last[:] = [client.backend(host, port, probe=True)]
        return last[0] in backends

    converge(ours, f"{host}:{port} to answer from {len(backends)} backends", timeout,
              {"last answered by": last})


def wait_for_unreachable(client: Client, host: str, port: int, backends: set[str], timeout: float,
                         attempt: float = 1.0) -> None:
    """``SUCCESSES`` new connections in a row reach none of ``backends``: they fail (refused,
    reset or no answer in ``attempt``), or a backend outside them answers (an implementation may
    give a freed address to the next Service at once, as MetalLB does; the Service that let it go
    is what is checked). They are probes: a probe port is never one a node still holds a stale
    entry for (see ``probe_ports``), so the harness's own earlier connections cannot fake
    "unreachable", and the entries these leave (the address is not served) never meet a measured
    connection."""
    last: list[str] = []

    def fails() -> bool:
        try:
            answer = client.get(host, port, timeout=attempt, probe=True)
        except OSError as exc:
            last[:] = [f"failed: {exc}"]
            return True
        last[:] = [f"{answer.status} {answer.body[:80]}"]
        return answer.status == 200 and answer.body not in backends

    converge(fails, f"{host}:{port} to refuse or drop new connections, or answer from backends "
                     f"other than these {len(backends)}", timeout, {"last": last})


def spread(client: Client, host: str, port: int, connections: int) -> Counter[str]:
    """How many of ``connections`` new connections each backend answered."""
    return Counter(client.backend(host, port) for _ in range(connections))


#: What a new connection ended with when no backend answered.
TIMEOUT, REFUSED, RESET, ERROR = "timeout", "refused", "reset", "error"


def answer_or_failure(client: Client, host: str, port: int) -> str:
    """The backend that answers one new connection, or how the connection failed."""
    try:
        return client.backend(host, port)
    except TimeoutError:
        return TIMEOUT
    except ConnectionRefusedError:
        return REFUSED
    except ConnectionResetError:
        return RESET
    except OSError as exc:
        return f"{ERROR}: {exc}"


def wait_for_every_connection_answered(client: Client, host: str, port: int, backends: set[str],
                                       timeout: float, batch: int = 10) -> None:
    """``SUCCESSES`` batches in a row of ``batch`` new connections are each answered by one of
    ``backends``: none is dropped, refused or reset any more (an LB still sending some connections
    to a node that drops them converges, one that goes on does not)."""
    last: list[str] = []

    def all_answered() -> bool:
        last[:] = [answer_or_failure(client, host, port) for _ in range(batch)]
        return set(last) <= backends

    converge(all_answered, f"every new connection to {host}:{port} to be answered by one of "
                           f"{len(backends)} backends", timeout, {"last batch": last}, interval=0.0)


def wait_for_source_kept(client: Client, host: str, port: int, timeout: float) -> None:
    """``SUCCESSES`` new connections in a row show the backends the client's own address."""
    last: list[tuple[str, str]] = []

    def kept() -> bool:
        seen, sent_from = client.source_seen(host, port, probe=True)
        last[:] = [(seen, sent_from)]
        return seen == sent_from

    converge(kept, f"backends behind {host}:{port} to see the client's own address", timeout,
              {"seen, sent from": last})


def wait_for_health_check(client: Client, node_ip: str, port: int, namespace: str, service: str,
                          local_endpoints: int, timeout: float) -> None:
    """kube-proxy's health check of a Service on one node answers 200 with local endpoints and 503
    without, and its JSON body names the Service and the count, ``SUCCESSES`` times in a row."""
    want = 200 if local_endpoints else 503
    last: list[object] = []

    def as_expected() -> bool:
        answer = client.get(node_ip, port, "/healthz")
        body = json.loads(answer.body)
        last[:] = [answer.status, body]
        return (answer.status == want and body["service"] == {"namespace": namespace, "name": service}
                and body["localEndpoints"] == local_endpoints)

    converge(as_expected, f"{node_ip}:{port}/healthz to answer {want} with localEndpoints={local_endpoints}",
              timeout, last, interval=0.2)
