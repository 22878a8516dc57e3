"""UDP exchanges from one fixed source port, as runs side by side make them from one client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from lbconform.traffic.client import Client

SOURCE_PORT = 40153


@contextmanager
def answering(before_answer: Callable[[], None]) -> Iterator[int]:
    """A UDP server on loopback that calls ``before_answer`` on each datagram, then answers "a"."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                _, peer = server.recvfrom(100)
            except TimeoutError:
                continue
            before_answer()
            server.sendto(b"a", peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_socket_bound_to_the_same_source_port_meanwhile_does_not_take_the_answer() -> None:
    """Another run binds the same fixed source port (SO_REUSEADDR, unconnected) while this flow
    waits for its answer: the kernel would give an unconnected flow's answer to the socket bound
    last; a connected flow gets it."""
    with ExitStack() as others:

        def another_run_binds() -> None:
            other = others.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            other.bind(("", SOURCE_PORT))

        with answering(another_run_binds) as port:
            client = Client(timeout=1.0)
            answers = [client.udp_exchange("127.0.0.1", port, "hostname", SOURCE_PORT) for _ in range(3)]
            assert answers == ["a"] * 3
