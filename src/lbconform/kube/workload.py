"""A backend workload (Deployment or DaemonSet of agnhost, or of the quiet server) and what suites
ask of it.

The suites speak of backends by the names they answer with (their pod name) and by where they
run; this owns deploying them, reading that from the pods, scaling and rolling, so that no suite
needs the Kubernetes API itself.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from lbconform.kube import objects, tweaks
from lbconform.kube.manifests import Applier, Tweak, load_one
from lbconform.kube.rawapi import ApiError, Json
from lbconform.resources import data_dir
from lbconform.traffic.timeline import Timeline
from lbconform.wait import poll_until

#: The backends' manifests (manifests/backend-KIND.yaml). ``quiet-deployment`` runs the quiet server
#: (manifests/quiet-server.py): no TCP keepalive from the backend, for flows whose idle time a
#: suite controls.
KINDS = ("deployment", "daemonset", "quiet-deployment")
QUIET_KIND = "quiet-deployment"
#: The ConfigMap the quiet backend's program is mounted from, and its one file.
QUIET_CONFIG_MAP, QUIET_PROGRAM = "quiet-server", "quiet-server.py"


def quiet_server_config_map() -> Json:
    """The ConfigMap holding manifests/quiet-server.py, as ``kubectl create configmap
    quiet-server --from-file=manifests/quiet-server.py`` makes it."""
    program = (data_dir("manifests") / QUIET_PROGRAM).read_text()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": QUIET_CONFIG_MAP},
            "data": {QUIET_PROGRAM: program}}


def ensure_quiet_program(applier: Applier) -> None:
    """The quiet backend's ConfigMap in the applier's namespace (once: a second call finds it)."""
    try:
        applier.create(quiet_server_config_map())
    except ApiError as exc:
        if exc.status != 409:
            raise


def deploy_backends(applier: Applier, kind: str, replicas: int, changes: tuple[Tweak, ...],
                    timeout: float) -> Workload:
    """Backends from manifests/backend-KIND.yaml with ``changes``, rolled out (the quiet one's
    ConfigMap first, once per namespace)."""
    if kind not in KINDS:
        raise ValueError(f"no backend kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == QUIET_KIND:
        ensure_quiet_program(applier)
    obj = applier.create(load_one(f"backend-{kind}", tweaks.replicas(replicas), *changes))
    workload = Workload(applier, obj["kind"], obj["metadata"]["name"])
    workload.wait_rolled_out(timeout)
    return workload


@dataclass
class Workload:
    applier: Applier
    kind: str
    name: str
    selector: str = "app=backend"

    @property
    def namespace(self) -> str:
        assert self.applier.namespace is not None
        return self.applier.namespace

    @property
    def path(self) -> str:
        plural = "deployments" if self.kind == "Deployment" else "daemonsets"
        return f"/apis/apps/v1/namespaces/{self.namespace}/{plural}/{self.name}"

    def pods(self) -> list[Json]:
        """Pods of the workload that are ready and not being deleted."""
        return [p for p in objects.pods(self.applier.api, self.namespace, self.selector)
                if objects.pod_ready(p) and not p["metadata"].get("deletionTimestamp")]

    def names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.pods()}

    def ips(self) -> set[str]:
        return {p["status"]["podIP"] for p in self.pods()}

    def by_node(self) -> dict[str, list[Json]]:
        out: dict[str, list[Json]] = {}
        for p in self.pods():
            out.setdefault(p["spec"]["nodeName"], []).append(p)
        return out

    def wait_rolled_out(self, timeout: float) -> Json:
        if self.kind == "Deployment":
            return objects.wait_for_deployment(self.applier.api, self.namespace, self.name, timeout)
        return objects.wait_for_daemonset(self.applier.api, self.namespace, self.name, timeout)

    def scale(self, replicas: int) -> None:
        self.applier.api.patch(self.path, {"spec": {"replicas": replicas}})

    def delete_pod(self, name: str) -> None:
        self.applier.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    def restart(self) -> None:
        """A rolling update, as ``kubectl rollout restart`` makes one (a new template annotation)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.applier.api.patch(self.path, {"spec": {"template": {"metadata": {"annotations": {
            "lbconform.io/restartedAt": f"{stamp}-{time.monotonic_ns()}"}}}}})

    def pod_names_ever(self) -> set[str]:
        """Every pod of the workload the API still knows, terminating ones included."""
        return {p["metadata"]["name"] for p in objects.pods(self.applier.api, self.namespace, self.selector)}

    def roll(self, timeout: float, timeline: Timeline | None = None) -> None:
        """A rolling update, waited for until every old pod is gone (not only until the new
        ones are available: the old ones' termination is what clients may notice). Each pod
        that starts terminating, goes away or becomes ready is an event on ``timeline``."""
        old = self.pod_names_ever()
        seen: dict[str, str] = {}

        def note(name: str, what: str) -> None:
            if seen.get(name) != what:
                seen[name] = what
                if timeline is not None:
                    timeline.event(f"pod {what}", name)

        if timeline is not None:
            timeline.event("rollout started", f"{self.kind} {self.name}")
        self.restart()

        def done() -> bool:
            api = self.applier.api
            pods = {p["metadata"]["name"]: p for p in objects.pods(api, self.namespace, self.selector)}
            for name, p in pods.items():
                if p["metadata"].get("deletionTimestamp"):
                    note(name, "terminating")
                elif name not in old and objects.pod_ready(p):
                    note(name, "ready")
            for name in old - set(pods):
                note(name, "gone")
            return not (old & set(pods))

        poll_until(done, timeout=timeout, interval=0.2,
                   description=f"the rolling update of {self.kind} {self.namespace}/{self.name} to replace "
                               f"every old pod")
        self.wait_rolled_out(timeout)
        if timeline is not None:
            timeline.event("rollout done", f"{self.kind} {self.name}")

    def wait_gone(self, pod: str, timeout: float, timeline: Timeline | None = None) -> None:
        """Wait until ``pod`` no longer exists (its termination, preStop and grace included)."""
        poll_until(lambda: pod not in self.pod_names_ever(), timeout=timeout, interval=0.2,
                   description=f"pod {self.namespace}/{pod} to be gone")
        if timeline is not None:
            timeline.event("pod gone", pod)

    def add_pod(self, node: str, name: str, timeout: float) -> Json:
        """One more backend pod outside the workload's control, on ``node``: it joins the Service's
        endpoints (same labels) without the workload replacing or removing any of its own."""
        template = copy.deepcopy(self.applier.api.get(self.path)["spec"]["template"])
        template["metadata"].pop("annotations", None)
        template["spec"]["nodeName"] = node
        template["spec"].pop("affinity", None)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": name},
               "spec": template["spec"]}
        created: Json = self.applier.create(pod)
        poll_until(lambda: name in self.names(), timeout=timeout, interval=0.2,
                   description=f"extra backend pod {self.namespace}/{name} to be ready on {node}")
        return created

    def update(self, change: Tweak) -> None:
        """Apply a tweak to the live workload (a rolling update when it changes the template)."""
        obj = self.applier.api.get(self.path)
        change(obj)
        self.applier.api.put(self.path, obj)

    def wait_replaced(self, old: set[str], timeout: float) -> set[str]:
        """Until none of the ``old`` pods exists and the workload is rolled out; the new pods."""
        poll_until(lambda: not (old & self.pod_names_ever()), timeout=timeout, interval=0.2,
                   description=f"pods {sorted(old)} of {self.namespace}/{self.name} to be replaced")
        self.wait_rolled_out(timeout)
        return self.names()
