"""HTTP over one keep-alive connection per user, reused until it fails.

A reused connection is pinned to one backend by the load balancer's connection tracking, so
this user sees what happens to established flows when that backend goes away: a reset, a
timeout, or (what a good drain gives) nothing at all. After a failure the next request opens
a new connection, as a browser or a pooled client would.

``FastHttpUser`` (geventhttpclient) wraps a reset as ``HTTPConnectionClosed`` with the
``ConnectionResetError`` as its ``__context__``; ``lbconform_locust.failure_of`` looks there.
``concurrency = 1`` keeps one connection per user. Settings: see ``lbconform_locust``.
"""

from __future__ import annotations

import lbconform_locust as lb
from locust import FastHttpUser, constant_throughput, task


class KeepAliveUser(FastHttpUser):
    wait_time = constant_throughput(lb.USER_RATE)
    concurrency = 1
    max_retries = 0
    network_timeout = lb.TIMEOUT_SECONDS
    connection_timeout = lb.TIMEOUT_SECONDS

    @task
    def hostname(self) -> None:
        with self.client.get(lb.PATH, name=lb.PATH, catch_response=True, allow_redirects=False) as response:
            error = getattr(response, "error", None) or response.request_meta.get("exception")
            status = getattr(response, "status_code", 0) or 0
            # An error status arrives as an error that carries the response: judge the answer.
            if error is not None and not (status and hasattr(error, "response")):
                response.failure(lb.failure_of(error))
                return
            verdict = lb.judge(status, response.text or "")
            if verdict is None:
                response.success()
            else:
                response.failure(verdict)
