"""JSON requests and watches over the official client's ApiClient (its auth, TLS and pools).

Components that move whole objects around as data, such as the lab's node agent, use plain
dicts: they patch status, read a field, watch a collection. The typed models add nothing
there but deserialization cost, so this module speaks the REST paths directly while the
official client still owns the connection.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

Json = dict[str, Any]

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the apiserver, with its status code and Status reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def api_client(kubeconfig: Path | str, context: str | None = None) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), context=context)
    return api


class RawApi:
    """GET/POST/PATCH/DELETE/watch on REST paths, with dicts in and out."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def _call(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
              content_type: str, timeout: float | tuple[float, float] | None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        _, url, hdrs, ser_body, _ = self.api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"],
        )
        return self.api.call_api(method, url, header_params=hdrs, body=ser_body,
                                 _request_timeout=timeout)

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: Any = None, content_type: str = "application/json",
                timeout: float = 30) -> Json:
        resp = self._call(method, path, query, body, content_type, timeout)
        data = resp.read()
        if not 200 <= resp.status < 300:
            try:
                status = json.loads(data) if data else {}
            except ValueError:  # not a Status: "404 page not found" for a group it does not serve
                status = {}
            status = status if isinstance(status, dict) else {}
            raise ApiError(resp.status, str(status.get("reason", resp.reason)),
                           str(status.get("message", data[:200].decode(errors="replace"))))
        parsed: Json = json.loads(data) if data else {}
        return parsed

    def get(self, path: str, **query: Any) -> Json:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Json) -> Json:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: Json, content_type: str = STRATEGIC) -> Json:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: Json | None = None) -> Json:
        return self.request("DELETE", path, body=body)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              **query: Any) -> Iterator[Json]:
        """Yield watch events from ``resource_version``; ends when the server closes the watch.

        An ERROR event (410 Gone, for one) is raised as ApiError, so the caller re-lists.
        """
        params = dict(query, watch="true", resourceVersion=resource_version,
                      allowWatchBookmarks="true", timeoutSeconds=str(timeout_seconds))
        resp = self._call("GET", path, params, None, "application/json",
                          (10, timeout_seconds + 30))
        raw = resp.response
        try:
            if not 200 <= resp.status < 300:
                data = json.loads(raw.data or b"{}")
                raise ApiError(resp.status, data.get("reason", ""), data.get("message", ""))
            buf = b""
            for chunk in raw.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event: Json = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object", {})
                        raise ApiError(int(obj.get("code", 500)), obj.get("reason", ""),
                                       obj.get("message", ""))
                    yield event
        finally:
            raw.release_conn()
