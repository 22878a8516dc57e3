"""HTTP over a new TCP connection for every request, as upstream's rolling-update disruption test does.

A connection that is never reused cannot hide behind a load balancer's connection tracking:
every request is a fresh flow the load balancer must place on a healthy backend, so this
user counts how many new connections a rollout or a node loss breaks. ``Connection: close``
asks the server to close, and the session drops its pool after every request, so a new
connection is opened even when a server ignores the header.

``requests`` (``HttpUser``) surfaces a reset as ``ConnectionResetError`` inside its own
exception; ``lbconform_locust.failure_of`` finds it and names the kind. Settings: see
``lbconform_locust``.
"""

from __future__ import annotations

import lbconform_locust as lb
from locust import HttpUser, constant_throughput, task


class NewConnectionUser(HttpUser):
    wait_time = constant_throughput(lb.USER_RATE)

    @task
    def hostname(self) -> None:
        with self.client.get(lb.PATH, name=lb.PATH, headers={"Connection": "close"},
                             timeout=(lb.TIMEOUT_SECONDS, lb.TIMEOUT_SECONDS), catch_response=True,
                             allow_redirects=False) as response:
            if response.error is not None:
                response.failure(lb.failure_of(response.error))
            else:
                verdict = lb.judge(response.status_code, response.text)
                if verdict is None:
                    response.success()
                else:
                    response.failure(verdict)
        self.client.close()
