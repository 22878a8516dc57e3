"""Service-account tokens for projected volumes: requested bound to the pod, refreshed before expiry.

As the kubelet's token manager: a TokenRequest for the pod's service account, bound to the
pod (so the token dies with it), with the audience and lifetime the volume asks for; the
token is requested again once 80 % of its requested lifetime has passed, or after 24 hours
(the API server may issue longer-lived tokens than asked for, and says so only in the JWT).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass

from lbconform.kube.rawapi import ApiError, RawApi

#: The kubelet refreshes a token once this fraction of its requested lifetime is left.
REFRESH_LEFT = 0.2
#: ... and in any case once it is this old.
MAX_AGE_SECONDS = 24 * 3600.0
#: The kubelet's default lifetime when a volume does not ask.
DEFAULT_SECONDS = 3600


class TokenError(Exception):
    """The API server refused the TokenRequest; the message says why."""


@dataclass(frozen=True)
class Token:
    value: str
    expires: float
    requested_seconds: int

    @property
    def issued(self) -> float:
        return self.expires - self.requested_seconds

    def due(self, now: float) -> bool:
        """Whether the token must be requested again at ``now`` (epoch seconds)."""
        return (now >= self.expires - REFRESH_LEFT * self.requested_seconds
                or now >= self.issued + MAX_AGE_SECONDS)


def _epoch(rfc3339: str) -> float:
    return dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


class TokenManager:
    """One node's tokens, by pod, service account, audience and lifetime."""

    def __init__(self, api: RawApi) -> None:
        self.api = api
        self._tokens: dict[tuple[str, str, str, str, int], Token] = {}
        self._lock = threading.Lock()

    def token(self, namespace: str, service_account: str, pod: str, pod_uid: str, audience: str,
              seconds: int) -> str:
        key = (namespace, service_account, pod_uid, audience, seconds)
        with self._lock:
            current = self._tokens.get(key)
        if current is not None and not current.due(time.time()):
            return current.value
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else None, "expirationSeconds": seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod,
                                            "uid": pod_uid}}}
        try:
            out = self.api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                                body)
        except ApiError as exc:
            raise TokenError(f"failed to fetch token: {exc}") from exc
        fresh = Token(out["status"]["token"], _epoch(out["status"]["expirationTimestamp"]), seconds)
        with self._lock:
            self._tokens[key] = fresh
        return fresh.value

    def forget(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._tokens if k[2] == pod_uid]:
                del self._tokens[key]
