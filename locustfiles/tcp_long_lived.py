"""One long-lived TCP connection per user, with an HTTP request over it now and then.

What a database client or a websocket does: the connection outlives rollouts, node losses
and idle timers, and the question is whether the load balancer keeps it. Each request
(``GET /hostname HTTP/1.1``, keep-alive) is reported to Locust with request_type ``TCP``;
a failed one is reported with its kind (``lbconform_locust.LoadFailure``), the connection is
dropped, and the next request connects again, so a reset costs one failure and the user
carries on. Settings: see ``lbconform_locust``.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import lbconform_locust as lb
from locust import User, constant_throughput, task


class LongLivedTcpUser(User):
    wait_time = constant_throughput(lb.USER_RATE)

    def on_start(self) -> None:
        target = urlsplit(self.host or "")
        if not target.hostname:
            raise ValueError(f"host {self.host!r}: use http://ADDRESS:PORT")
        self.address = (target.hostname, target.port or 80)
        self.host_header = target.netloc
        self.sock: socket.socket | None = None
        self.buffer = b""

    def on_stop(self) -> None:
        self._drop()

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""

    @task
    def hostname(self) -> None:
        started = time.perf_counter()
        length = 0
        failure: lb.LoadFailure | None = None
        try:
            if self.sock is None:
                self.sock = socket.create_connection(self.address, timeout=lb.TIMEOUT_SECONDS)
            self.sock.sendall(f"GET {lb.PATH} HTTP/1.1\r\nHost: {self.host_header}\r\n\r\n".encode())
            status, body, self.buffer = lb.read_response(self.sock, self.buffer)
            length = len(body)
            failure = lb.judge(status, body)
        except (OSError, EOFError) as exc:
            failure = lb.failure_of(exc)
            self._drop()
        except ValueError as exc:
            failure = lb.LoadFailure(lb.WRONG, f"unreadable answer: {exc}"[:200])
            self._drop()
        self.environment.events.request.fire(
            request_type="TCP", name=lb.PATH, response_time=(time.perf_counter() - started) * 1000,
            response_length=length, exception=failure, context={},
        )
