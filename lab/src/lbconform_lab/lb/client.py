"""Reading the reference LB's state API from outside the lab, as a provider reads a cloud API."""

from __future__ import annotations

import http.client
import json
from typing import Any

from lbconform.errors import LabError
from lbconform.nsexec import run_in_netns
from lbconform_lab import topology as topo
from lbconform_lab.lb.api import PORT

#: The state API answers from memory; anything slower means the LB is stuck.
API_TIMEOUT_SECONDS = 5.0


def _request(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    def call() -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=API_TIMEOUT_SECONDS)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()

    try:
        return run_in_netns(topo.LB_NS, call)
    except OSError as exc:
        raise LabError(f"the lab's load balancer does not answer on :{PORT} ({exc}): is the lab up?") from exc


class LabLB:
    """The state API of the running lab's reference load balancer."""

    def services(self) -> dict[str, Any]:
        _, body = _request("GET", "/services")
        services: dict[str, Any] = body["services"]
        return services

    def deleted_but_kept(self) -> dict[str, str]:
        """Deleted Services whose addresses the keep-deleted-vip defect still serves: key -> VIP."""
        _, body = _request("GET", "/services")
        return dict(body.get("deletedButKept") or {})

    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = _request("GET", f"/services/{namespace}/{name}")
        return body if status == 200 else None

    def defects(self, run: str | None = None) -> list[str]:
        """The lab-wide defects, or those of one harness run's Services."""
        _, body = _request("GET", "/defects")
        return list(body["runDefects"].get(run, []) if run else body["defects"])

    def set_defects(self, defects: list[str], run: str | None = None) -> list[str]:
        """Switch the lab-wide defects, or (with ``run``) only those of the Services that run makes."""
        status, body = _request("PUT", "/defects", {"defects": defects, **({"run": run} if run else {})})
        if status != 200:
            raise LabError(f"the LB refused the defects: {body.get('error')}")
        return list(body["defects"])
