"""What a run checks before it boots a lab or makes anything in a cluster.

A mistyped kubeconfig, a cluster that does not answer, nodes that are not Ready or an identity
that may not create Services would otherwise surface as every test erroring, and a report that
says the load balancer failed. Each check here ends the run instead with one line that says what
was tried, what answered and what to check (a ``UsageError``: exit 2), before anything exists
that would need cleaning up. The local checks (``check_local``) come before a lab is booted;
the cluster's (``check_cluster``) before any test runs, on the lab too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbconform.errors import UsageError

#: Test processes per core the suites can use: they wait on the cluster far more than they compute.
WORKERS_PER_CORE = 4
#: Seconds each preflight request may take: a cluster that needs longer is not fit to test.
REQUEST_SECONDS = 5.0


@dataclass(frozen=True)
class Access:
    """One verb on one resource the suites need, cluster-wide."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {what}" + (f" ({self.group})" if self.group else "")


#: What the suites and their fixtures do: a namespace per test with its workloads and Service,
#: endpoint slices and events read, nodes marked (the exclusive and chaos tests), pods deleted.
REQUIRED_ACCESS = (
    Access("create", "namespaces"), Access("delete", "namespaces"), Access("list", "namespaces"),
    Access("create", "services"), Access("update", "services"), Access("patch", "services"),
    Access("delete", "services"), Access("get", "services"),
    Access("create", "deployments", "apps"), Access("patch", "deployments", "apps"),
    Access("delete", "deployments", "apps"), Access("create", "daemonsets", "apps"),
    Access("update", "daemonsets", "apps"), Access("delete", "daemonsets", "apps"),
    Access("create", "pods"), Access("delete", "pods"), Access("list", "pods"),
    Access("list", "endpointslices", "discovery.k8s.io"), Access("list", "events"),
    Access("list", "nodes"), Access("patch", "nodes"),
)


def check_local(report_dir: Path, workers: int, cores: int | None = None) -> list[Path]:
    """The report directory can be written and ``workers`` suits the machine; the directories this
    made to find out, deepest first (``undo`` removes them if a later check fails)."""
    cores = cores or os.cpu_count() or 1
    if workers > WORKERS_PER_CORE * cores:
        raise UsageError(f"-n {workers}: at most {WORKERS_PER_CORE * cores} test processes on this machine "
                         f"({cores} core(s), {WORKERS_PER_CORE} each: the suites mostly wait)")
    return _writable(report_dir)


def _writable(report_dir: Path) -> list[Path]:
    path = report_dir.resolve()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".lbconform-probe-"):
            pass
    except OSError as exc:
        undo(missing)
        raise UsageError(f"--report-dir {report_dir}: cannot write there ({exc.strerror or exc}): "
                         "name a directory you can write") from None
    return missing


def undo(made: list[Path]) -> None:
    """Remove the empty directories ``check_local`` made."""
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()


def check_cluster(kubeconfig: Path, context: str | None) -> None:
    """The kubeconfig is usable, the cluster answers, every node is Ready and the identity may do
    everything in REQUIRED_ACCESS."""
    import yaml

    from lbconform.kube.rawapi import RawApi, api_client

    try:
        doc = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"--kubeconfig {kubeconfig}: cannot read it as YAML ({_first_line(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), list):
        raise UsageError(f"--kubeconfig {kubeconfig}: not a kubeconfig (no list of clusters in it): name the "
                         "file kubectl uses for the cluster")
    # urllib3 logs each retry of a refused connection: the one line below says it all.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    try:
        api = RawApi(api_client(kubeconfig, context))
    except Exception as exc:  # the client raises ConfigException, TypeError, YAML errors...
        raise UsageError(f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({_first_line(exc)}): "
                         "name a kubeconfig file, and its context with --context") from None
    server = api.api.configuration.host
    version = _ask(api, "GET", "/version", server, "answer /version")
    nodes = _ask(api, "GET", "/api/v1/nodes", server, "list nodes").get("items") or []
    if not nodes:
        raise UsageError(f"the cluster at {server} (Kubernetes {version.get('gitVersion', '?')}) has no "
                         "nodes: the suites need at least two Ready nodes")
    not_ready = sorted(n["metadata"]["name"] for n in nodes if not _ready(n))
    if not_ready:
        raise UsageError(f"the cluster at {server}: node(s) {', '.join(not_ready)} not Ready: "
                         "wait for them or remove them before a run")
    for access in REQUIRED_ACCESS:
        review = _ask(api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", server,
                      "review the run's access", {
                          "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                          "spec": {"resourceAttributes": {
                              "verb": access.verb, "resource": access.resource, "group": access.group,
                              "subresource": access.subresource}}})
        if not (review.get("status") or {}).get("allowed"):
            raise UsageError(f"the kubeconfig's identity may not {access} in the cluster at {server}, and "
                             "the suites need it: use an identity with cluster-admin, or grant it")


def _ask(api: Any, method: str, path: str, server: str, what: str, body: Any = None) -> dict[str, Any]:
    from lbconform.kube.rawapi import ApiError

    try:
        answer: dict[str, Any] = api.request(method, path, body=body, timeout=REQUEST_SECONDS)
    except ApiError as exc:
        raise UsageError(f"the cluster at {server} refused to {what}: {exc.status} {exc.reason}: "
                         f"{_first_line(exc.message)}: check the kubeconfig's credentials") from None
    except Exception as exc:  # urllib3's connection errors, TLS errors, timeouts
        raise UsageError(f"the cluster at {server} did not {what} ({_first_line(exc)}): check the "
                         "kubeconfig's server address and that the cluster is up") from None
    return answer


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _first_line(exc: object, limit: int = 160) -> str:
    # urllib3 wraps the cause twice ("Max retries exceeded ... (Caused by NewConnectionError(<object
    # at 0x...>: Failed to establish a new connection: [Errno 111] Connection refused))"): its end says it.
    while isinstance(reason := getattr(exc, "reason", None), BaseException):
        exc = reason
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "object at 0x" in text:
        text = ": ".join(text.rsplit(": ", 2)[-2:])
    return text if len(text) <= limit else text[:limit - 3] + "..."
