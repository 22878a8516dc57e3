"""Test namespaces: one per test, labelled with the run, and how they go away.

When a test ends, everything it made in its namespace is deleted and waited for at once (its
Services and so their load balancers, its workloads, its pods), so a later test meets none of
it; pods still terminating then get a one-second grace period, since the test that configured
their preStop hooks is over. The empty namespace is deleted too, but waited for only when the
session ends, all of them together: kube-controller-manager's namespace controller holds every
deleted namespace for a fixed five seconds (``namespaceDeletionGracePeriod``) before it acts,
which would otherwise add five seconds to every test. A namespace still there after
``timeout`` is an error then, naming it.
"""

from __future__ import annotations

import uuid
from functools import partial

from lbconform.kube.manifests import Applier, is_gone
from lbconform.kube.rawapi import RawApi
from lbconform.kube.sweeper import RUN_LABEL
from lbconform.wait import poll_until

#: Pods a finished test left terminating are given this grace period (seconds).
LEFTOVER_POD_GRACE = 1


class TestNamespaces:
    """Makes the namespaces of one run's tests and owns their removal."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, api: RawApi, run_id: str, timeout: float) -> None:
        self.api, self.run_id, self.timeout = api, run_id, timeout
        self._deleting: list[str] = []

    def create(self) -> Applier:
        """A fresh namespace; the Applier creates in it, labelled with the run."""
        labels = {RUN_LABEL: self.run_id}
        name = f"lbc-{self.run_id}-{uuid.uuid4().hex[:6]}"
        Applier(self.api, None, labels).create({"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": name}})
        return Applier(self.api, name, labels)

    def release(self, applier: Applier) -> None:
        """Delete what the test made and wait until it is gone; then delete its namespace."""
        assert applier.namespace is not None
        try:
            applier.cleanup(self.timeout, pod_grace=LEFTOVER_POD_GRACE)
        finally:
            self.api.delete(f"/api/v1/namespaces/{applier.namespace}")
            self._deleting.append(applier.namespace)

    def wait_gone(self) -> None:
        """Every released namespace is gone (each within ``timeout``)."""
        while self._deleting:
            name = self._deleting[-1]
            poll_until(partial(is_gone, self.api, f"/api/v1/namespaces/{name}"), timeout=self.timeout,
                       interval=0.2, description=f"namespace {name} to be deleted")
            self._deleting.pop()
