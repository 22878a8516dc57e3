"""lbconform's pytest plugin (entry point ``pytest11``): features, profiles, the target, results.

Every test under a ``suites/`` folder declares the features it needs with
``@pytest.mark.features(Feature.X, ...)``; one without is a usage error, because a report
could not say what its result means. Tests of features outside the selected profiles are
deselected; tests of features the provider does not support (or the user exempted), and
tests whose provider raises ``NotSupported`` while they run, are reported as *not
supported*, which a report keeps apart from *skipped*. A failing suite test gets the
diagnostics of the Services it made attached. The run id is made once by the controller
and handed to pytest-xdist workers, so that every object of one run carries the same label.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lbconform import options, progress
from lbconform.features import PROFILES, Feature, parse_features, test_profile
from lbconform.report.model import (
    DESCRIPTION_PROPERTY,
    ERROR_PROPERTY,
    FEATURES_PROPERTY,
    NOT_SUPPORTED,
    NOT_SUPPORTED_TEXT,
    RESULT_PROPERTY,
)

log = logging.getLogger(__name__)

SUITES_DIR = "suites"

#: Callables a test's fixtures register; on failure each one's result is attached.
DIAGNOSTICS = pytest.StashKey[list[tuple[str, Callable[[], Any]]]]()
_RUN_ID = pytest.StashKey[str]()
#: A suite test's hold on the cluster's share lock (``ClusterShare``), for the fixtures that change
#: a node to have it alone first.
SHARE = pytest.StashKey["ClusterShare"]()
_TARGET = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lbconform")
    options.add_all(group.addoption, pytest=True)
    group.addoption("--report-dir", default=None,
                    help="write conformance-report.yaml and datasheet.md here when the run ends")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "features(*names): the lbconform features a suite test needs")
    config.addinivalue_line(
        "markers", "exclusive(from_first_change=False): changes what every test sees (a node's state); "
        "runs while no other does, from its start or from the first node it changes")
    config.addinivalue_line("markers", "lab: needs root and the lab; boots one or reuses a running one")
    config.addinivalue_line(
        "markers", "disruptive: kills, drains or restarts nodes; runs only with --allow-disruptive")
    config.addinivalue_line(
        "markers", "lab_lifecycle: boots and removes labs itself; runs without a shared lab")
    workerinput = getattr(config, "workerinput", None)
    progress_dir = os.environ.get(progress.ENV)
    tty = progress.terminal() if workerinput is None and progress_dir else None
    if tty is not None and progress_dir:
        config.pluginmanager.register(progress.Progress(Path(progress_dir), tty), "lbconform-progress")
    if workerinput is not None:
        config.stash[_RUN_ID] = workerinput["lbconform_run_id"]
    else:
        config.stash[_RUN_ID] = config.getoption("--run-id") or uuid.uuid4().hex[:8]
        report_dir = config.getoption("--report-dir")
        if report_dir:
            from lbconform.report.collector import ReportCollector

            collector = ReportCollector(Path(report_dir), lambda: run_info(config), run_options(config))
            config.pluginmanager.register(collector, "lbconform-report")


def selected_profiles(config: pytest.Config) -> list[str]:
    profiles = list(config.getoption("--profile") or ["core"])
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        raise pytest.UsageError(f"unknown profile {unknown[0]!r}: profiles are {', '.join(PROFILES)}")
    return profiles


def run_options(config: pytest.Config) -> dict[str, Any]:
    """The options the run was given, by ``dest``, with its test processes and its ``-k``/``-m``
    selection: the run's parameters in the report's evidence, from which a reader runs it again."""
    values = {o.dest: options.get(config.getoption, o.dest) for o in options.RUN_OPTIONS}
    workers = getattr(config.option, "numprocesses", None)  # pytest-xdist's -n: None without, "auto" unsaid
    values["workers"] = 1 if workers is None else workers if isinstance(workers, int) else None
    values["keyword"] = config.getoption("keyword", None) or None
    values["markexpr"] = config.getoption("markexpr", None) or None
    return values


def run_info(config: pytest.Config) -> Any:
    """The run's facts for the report, asked of the target when the run ends."""
    from lbconform.declared_provider import implementation_of, provenance_of
    from lbconform.report.model import Implementation, RunInfo, lbconform_version, utc_now

    target = session_target(config)
    provider = target.provider
    from_file = implementation_of(provider)

    def opt(dest: str, key: str) -> str:
        """The option's value, else the declaration file's implementation field ``key``."""
        return str(options.get(config.getoption, dest) or from_file.get(key, ""))

    return RunInfo(
        implementation=Implementation(opt("organization", "organization"), opt("project", "project"),
                                      opt("url", "url"), opt("implementation_version", "version"),
                                      tuple(options.get(config.getoption, "contact"))),
        provider=provider.name, mode=provider.mode or "default", target=target.kind,
        kubernetes_version=target.kubernetes_version(), nodes=tuple(sorted(target.node_addresses())),
        date=utc_now(), lbconform_version=lbconform_version(), run_id=run_id(config),
        profiles=tuple(selected_profiles(config)),
        declared=dataclasses.asdict(provider.declared()), declared_sources=provenance_of(provider),
        timeouts=dataclasses.asdict(target.timeouts))


@pytest.hookimpl(optionalhook=True)
def pytest_report_header(config: pytest.Config) -> str | None:
    """Said once per run, by the controller: whether RSTs can be counted on the wire here."""
    from lbconform.traffic.capture import capture_available

    reason = capture_available()
    return None if reason is None else f"lbconform: RSTs on the wire are {reason}; every wire count says so"


def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker uses the controller's run id."""
    node.workerinput["lbconform_run_id"] = node.config.stash[_RUN_ID]


def run_id(config: pytest.Config) -> str:
    return config.stash[_RUN_ID]


def share_lock(config: pytest.Config) -> Path:
    """The file whose flock lets ``exclusive`` suite tests have the cluster alone (``share_lock_of``
    the run's apiserver)."""
    return share_lock_of(_cluster_host(config))


def share_lock_of(host: str) -> Path:
    """The share lock of the cluster whose apiserver is ``host``. There is one per cluster, not per
    run, so that runs against one cluster from this machine at the same time wait for each other's
    exclusive tests too (and so may other programs that change what the runs see, such as the lab
    tests beside the reference runs); it is never removed, since another run may hold it."""
    return Path(tempfile.gettempdir()) / f"lbconform-cluster-{_digest(host)}.lock"


def batch_lock(config: pytest.Config, name: str) -> Path:
    """The file whose flock lets one run at a time, of the runs against one cluster from this
    machine, make a batch of kind ``name`` (``one_batch_at_a_time``): fifty Services created at once
    by each of two runs would be a hundred at once for the implementation, not the fifty the test
    asks for. Like the share lock, one per cluster, never removed."""
    return Path(tempfile.gettempdir()) / f"lbconform-batch-{_digest(_cluster_host(config))}-{name}.lock"


@contextlib.contextmanager
def one_batch_at_a_time(path: Path) -> Iterator[None]:
    """Hold the batch lock ``path`` (alone) for the block."""
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def claims_dir(config: pytest.Config) -> Path:
    """Where the runs against one cluster from this machine claim requestable addresses
    (``lbconform.claims``); like the share lock, one per cluster, never removed."""
    return Path(tempfile.gettempdir()) / f"lbconform-claims-{_digest(_cluster_host(config))}"


def _cluster_host(config: pytest.Config) -> str:
    return str(session_target(config).api.api.configuration.host)


def _digest(host: str) -> str:
    return hashlib.sha256(host.encode()).hexdigest()[:16]


class ClusterShare:
    """One test's hold on the cluster's lock file ``path``: shared, or alone.

    Every holder passes a gate (``path`` with the suffix ``.gate``) on its way in, and an
    exclusive one keeps the gate while it waits, so it waits only for the holders already in:
    without the gate, shared holders that kept arriving beside it held it off until the runs
    were nearly over (271 s of a mode run's 439 s, three mode runs at once). A holder that is in
    shared and must then be alone (``take_alone``) leaves first and comes back through the gate:
    two shared holders that both turned exclusive in place would wait for each other forever."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.alone = False
        self._lock: Any = None

    def enter(self, exclusive: bool) -> None:
        lock = self.path.open("a")
        try:
            with self.path.with_suffix(".gate").open("a") as gate:
                fcntl.flock(gate, fcntl.LOCK_EX)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                finally:
                    fcntl.flock(gate, fcntl.LOCK_UN)
        except BaseException:
            lock.close()
            raise
        self._lock, self.alone = lock, exclusive

    def take_alone(self) -> None:
        """Have the cluster alone from now until ``leave`` (at once where it already has)."""
        if not self.alone:
            self.leave()
            self.enter(True)

    def leave(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock, self.alone = None, False


@contextlib.contextmanager
def cluster_share(path: Path, exclusive: bool) -> Iterator[ClusterShare]:
    """Hold the cluster's lock file ``path`` for the block: shared, or alone where ``exclusive``
    (see ``ClusterShare``)."""
    share = ClusterShare(path)
    share.enter(exclusive)
    try:
        yield share
    finally:
        share.leave()


def exclusive_from_start(item: pytest.Item) -> bool:
    """Whether the test has the cluster alone from its start: it is marked ``exclusive``, unless
    the mark says ``from_first_change=True`` (alone from the first node it changes on: what it
    makes before, in its own namespace, changes nothing other tests see, and a test the
    implementation does not support then never holds the others back)."""
    mark = item.get_closest_marker("exclusive")
    return mark is not None and not mark.kwargs.get("from_first_change", False)


def load_provider(config: pytest.Config) -> Any:
    """The run's provider, in the run's mode, with the run's declaration file (if any) over its claims."""
    from lbconform import providers
    from lbconform.declared_provider import apply_declaration
    from lbconform.errors import UsageError
    from lbconform.localcluster import the_local_cluster

    try:
        name = config.getoption("--provider")
        if not name:
            if config.getoption("--kubeconfig"):
                raise UsageError("with --kubeconfig, name the implementation's provider with --provider")
            name = the_local_cluster().default_provider
        provider = providers.load(name)
        mode = config.getoption("--mode")
        if mode is not None:
            provider.set_mode(mode)
        declaration = config.getoption("--declaration")
        if declaration:
            provider = apply_declaration(provider, declaration)
    except Exception as exc:
        raise pytest.UsageError(str(exc)) from None
    return provider


def session_target(config: pytest.Config) -> Any:
    """The run's target, connected once per test process."""
    from lbconform.target import connect

    if _TARGET not in config.stash:
        config.stash[_TARGET] = connect(
            load_provider(config), kubeconfig=config.getoption("--kubeconfig"),
            context=config.getoption("--context"), timeout_overrides=config.getoption("--lbconform-timeout"),
            client_address=config.getoption("--client-address"),
            client_netns=config.getoption("--client-netns"),
            provider_options=config.getoption("--provider-option"))
    return config.stash[_TARGET]


def in_suites(item: pytest.Item) -> bool:
    return SUITES_DIR in Path(str(item.fspath)).parts


def supported_features(config: pytest.Config) -> set[Feature]:
    """The provider's features, plus the user's claims, minus the user's exemptions."""
    try:
        added = parse_features(config.getoption("--features"))
        exempt = parse_features(config.getoption("--exempt-features"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    features: set[Feature] = load_provider(config).features()
    return (features | added) - exempt


def item_features(item: pytest.Item) -> set[Feature]:
    names: list[str] = []
    for mark in item.iter_markers("features"):
        names += [str(a) for a in mark.args]
    try:
        return parse_features(names)
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None


@pytest.hookimpl(tryfirst=True)  # before allure-pytest filters by the labels this adds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_items = [i for i in items if in_suites(i)]
    if not suite_items:
        return
    profiles = set(selected_profiles(config))
    supported = supported_features(config)
    keep: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if not in_suites(item):
            keep.append(item)
            continue
        feats = item_features(item)
        if not feats:
            raise pytest.UsageError(
                f"{item.nodeid} declares no features: add @pytest.mark.features(Feature....)")
        if test_profile(feats) not in profiles:
            deselected.append(item)
            continue
        item.user_properties.append((FEATURES_PROPERTY, ",".join(sorted(f.value for f in feats))))
        item.user_properties.append((DESCRIPTION_PROPERTY, description(item)))
        _label_for_allure(item, feats)
        missing = sorted(f.value for f in feats - supported)
        if item.get_closest_marker("disruptive") and not config.getoption("allow_disruptive"):
            item.add_marker(pytest.mark.skip(reason="disruptive (kills, drains or restarts nodes): "
                                                    "run with --allow-disruptive"))
        elif missing:
            item.user_properties.append((RESULT_PROPERTY, NOT_SUPPORTED))
            item.add_marker(pytest.mark.skip(reason=f"{NOT_SUPPORTED_TEXT}: {', '.join(missing)}"))
        keep.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = exclusive_first(keep)


def exclusive_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The suites' ``exclusive`` tests first, the rest in their order. An exclusive test waits
    until every test already holding the cluster has ended, keeping new ones out meanwhile
    (``cluster_share``): at the start those are each process's first tests, later they may be
    minutes-long idle probes of this run or of another run against the same cluster, whose wait
    would hold every test process back."""
    return sorted(items, key=lambda i: not (in_suites(i) and i.get_closest_marker("exclusive")))


def description(item: pytest.Item) -> str:
    """The first line of the test's docstring: the behaviour it checks."""
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else item.name


def _label_for_allure(item: pytest.Item, feats: set[Feature]) -> None:
    from lbconform.report.allure import label_markers

    profile = test_profile(feats)
    for mark in label_markers(profile, sorted(f.value for f in feats), description(item)):
        item.add_marker(mark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, pytest.TestReport, pytest.TestReport]:
    report = yield
    from lbconform.providers.base import NotSupported

    if call.excinfo is not None and call.excinfo.errisinstance(NotSupported):
        item.user_properties.append((RESULT_PROPERTY, NOT_SUPPORTED))
        report.outcome = "skipped"
        why = f"{NOT_SUPPORTED_TEXT}: {call.excinfo.value}"
        report.longrepr = (str(item.path), item.location[1] or 0, why)
        report.user_properties = list(item.user_properties)
    elif report.failed:
        assertion = (AssertionError, pytest.fail.Exception)
        if call.excinfo is not None and not call.excinfo.errisinstance(assertion):
            item.user_properties.append((ERROR_PROPERTY, call.when))
            report.user_properties = list(item.user_properties)
        if call.when == "call":
            _attach_diagnostics(item, report)
    return report


def _attach_diagnostics(item: pytest.Item, report: pytest.TestReport) -> None:
    from lbconform.report.allure import attach_json

    for name, gather in item.stash.get(DIAGNOSTICS, []):
        try:
            data = gather()
        except Exception as exc:
            data = {"error": f"diagnostics could not be gathered: {type(exc).__name__}: {exc}"}
        attach_json(f"diagnostics: {name}", data)
        report.sections.append((f"lbconform diagnostics: {name}", json.dumps(data, indent=1, default=str)))
