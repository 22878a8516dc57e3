"""Declaration files: a bad one is one line naming the field and makes nothing; a good one overrides
the provider value by value and the report says which values came from it; every installed
provider's declaration, as ``lbconform declaration show`` prints it, loads back unchanged."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from lbconform import cli, providers
from lbconform.config import Timeouts
from lbconform.declaration import (
    FIELDS,
    MAX_SECONDS,
    Declaration,
    load,
    parse,
    render,
    schema,
    schema_problems,
    to_document,
)
from lbconform.declared_provider import (
    FROM_DECLARATION,
    FROM_PROVIDER,
    DeclaredProvider,
    apply_declaration,
    provenance_of,
)
from lbconform.errors import UsageError
from lbconform.features import Feature
from lbconform.providers.base import Declared, Provider, ServiceRef
from lbconform.providers.generic import GenericProvider
from lbconform.report import conformance, datasheet
from lbconform.report import schema as report_schema
from lbconform.report.model import Implementation, RunInfo, TestResult
from lbconform.run import RunOptions, pytest_argv

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "declarations" / "reference-lb.yaml"
HEAD = "apiVersion: lbconform.io/v1alpha1\nkind: Declaration\n"
DOCS = "https://example.org/lb/docs"

#: (file content, the error after ``my-lb.yaml: ``, whether the schema refuses the file too).
BAD: list[tuple[str, str, bool]] = [
    ("declared: [unclosed\n", "not YAML or JSON", False),
    ("", "a Declaration is a mapping (apiVersion, kind, declared, ...), got nothing", True),
    ("- apiVersion\n- kind\n", "a Declaration is a mapping (apiVersion, kind, declared, ...), got a list",
     True),
    ("kind: Declaration\n", "apiVersion: missing: give apiVersion: lbconform.io/v1alpha1", True),
    ("apiVersion: lbconform.io/v2\nkind: Declaration\n",
     'apiVersion: must be lbconform.io/v1alpha1, got "lbconform.io/v2"', True),
    ("apiVersion: lbconform.io/v1alpha1\nkind: ConformanceReport\n",
     'kind: must be Declaration, got "ConformanceReport"', True),
    (HEAD + "spec: {}\n", "spec: unknown field: the fields are apiVersion, kind, implementation", True),
    (HEAD + "features: [UDP, Teleport]\n", 'features[1]: unknown feature "Teleport": known features are',
     True),
    (HEAD + "features: UDP\n", 'features: must be a list of feature names, got "UDP"', True),
    (HEAD + "implementation: {vendor: acme}\n",
     "implementation.vendor: unknown field: the fields are organization, project, url, version", True),
    (HEAD + "declared: {healthCheckIntervall: 5}\n",
     "declared.healthCheckIntervall: unknown field: the fields are healthChecks, healthCheckInterval", True),
    (HEAD + "declared: {health_check_interval: 5}\n", "declared.health_check_interval: unknown field", True),
    (HEAD + "declared: {healthCheckInterval: fast}\n",
     'declared.healthCheckInterval: must be a number of seconds >= 0, got "fast"', True),
    (HEAD + "declared: {healthCheckInterval: 5s}\n",
     'declared.healthCheckInterval: must be a number of seconds >= 0, got "5s"', True),
    (HEAD + "declared: {idleTimeout: -1}\n",
     "declared.idleTimeout: must be a number of seconds >= 0, or null for none, got -1", True),
    (HEAD + "declared: {nodeFailureDetection: 90000}\n",
     "declared.nodeFailureDetection: must be at most 86400 s (a day), got 90000", True),
    (HEAD + "declared: {healthyThreshold: 2.5}\n",
     "declared.healthyThreshold: must be a whole number from 0 to 100, got 2.5", True),
    (HEAD + "declared: {cleanupFinalizer: maybe}\n",
     'declared.cleanupFinalizer: must be true or false, got "maybe"', True),
    (HEAD + "declared: {entry: anycast}\n",
     'declared.entry: must be one of every-node, one-announcing-node, got "anycast"', True),
    (HEAD + "declared: {ipMode: vip}\n", 'declared.ipMode: must be one of VIP, Proxy, got "vip"', True),
    (HEAD + "declared: {healthChecks: false, healthyThreshold: 2}\n",
     "declared.healthyThreshold: must be 0 when healthChecks is false, got 2", True),
    (HEAD + "declared: {healthChecks: false}\nperPolicy: {Local: {unhealthyThreshold: 3}}\n",
     "perPolicy.Local.unhealthyThreshold: must be 0 when healthChecks is false, got 3", False),
    (HEAD + "declared: {idleReset: true}\n",
     "declared.idleReset: true, but idleTimeout is null (the generic provider's): give an idleTimeout, "
     "or idleReset: false", False),
    (HEAD + "declared: {localMoveGap: 3}\n",
     "declared.localMoveGap: must be 0 unless entry is one-announcing-node (the generic provider's), got 3.0",
     False),
    (HEAD + "declared: {idleTimeout: {value: 350, sauce: 'https://x'}}\n",
     "declared.idleTimeout.sauce: unknown field: the fields are value, source", True),
    (HEAD + "declared: {idleTimeout: {value: 350, source: ''}}\n",
     "declared.idleTimeout.source: must be a link to the implementation's documentation", True),
    (HEAD + "perPolicy: {Both: {idleTimeout: 5}}\n",
     "perPolicy.Both: unknown field: the fields are Cluster, Local", True),
    (HEAD + "perMode: {turbo: {idleTimeout: 5}}\n",
     "perMode.turbo: the generic provider has modes default", False),
    (HEAD + "timeouts: {lb_create: 10000}\n",
     "timeouts.lb_create: must be a number of seconds > 0 and at most 600 (the conformance limit), got 10000",
     True),
    (HEAD + "timeouts: {coffee: 5}\n", "timeouts.coffee: unknown timeout: the timeouts are lb_create", True),
    (HEAD + "interface: {idleTimeout: {annotations: {a/b: '{secs}'}, seconds: 60}}\n",
     "interface.idleTimeout.annotations.a/b: unknown placeholder {secs}: this template takes {seconds}",
     False),
    (HEAD + "interface: {idleTimeout: {annotations: {a/b: '{seconds}'}, seconds: 0}}\n",
     "interface.idleTimeout.seconds: must be the whole seconds the idle suites' Services ask for", True),
    (HEAD + "interface: {addressRequest: {addresses: [10.0.0.300]}}\n",
     'interface.addressRequest.addresses[0]: must be an address, a CIDR or a first-last range, got', False),
    (HEAD + "interface: {backendPool: {apiVersion: v1, resource: pods, objectName: '{name}'}}\n",
     "interface.backendPool: give one of address (a member's address) or node", True),
    (HEAD + "interface: {backendPool: {apiVersion: v1, resource: x, objectName: a, address: 'a..b'}}\n",
     "interface.backendPool.address: 'a..b' is not a field path", False),
    (HEAD + "interface: {controller: {kind: StatefulSet, namespace: lb, name: ctl}}\n",
     "interface.controller.kind: must be one of Deployment, DaemonSet, got 'StatefulSet'", True),
    (HEAD + "interface: {healthChecks: true}\n",
     "interface.healthChecks: unknown field: the fields are serviceAnnotations, idleTimeout", True),
]


def _ids(case: tuple[str, str, bool]) -> str:
    return case[1].split(":")[0][:40]


@pytest.mark.parametrize(("content", "message", "_schema"), BAD, ids=[_ids(c) for c in BAD])
def test_a_bad_declaration_is_one_line_naming_the_field_and_makes_nothing(
        content: str, message: str, _schema: bool, tmp_path: Path) -> None:
    (tmp_path / "my-lb.yaml").write_text(content)
    _one_line_and_nothing_made(tmp_path, "my-lb.yaml", f"lbconform: error: my-lb.yaml: {message}")


def test_a_missing_declaration_is_one_line_and_makes_nothing(tmp_path: Path) -> None:
    _one_line_and_nothing_made(tmp_path, "nope.yaml",
                               "lbconform: error: --declaration nope.yaml: no such file")


def _one_line_and_nothing_made(folder: Path, declaration: str, line: str) -> None:
    (folder / "kubeconfig").write_text("a file that exists\n")
    lab_dir, report_dir = folder / "lab", folder / "report"
    report_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "lbconform.cli", "run", "--declaration", declaration, "--provider", "generic",
         "--kubeconfig", "kubeconfig", "--report-dir", str(report_dir)],
        capture_output=True, text=True, timeout=60, check=False, cwd=folder,
        env={**os.environ, "LBCONFORM_LAB_DIR": str(lab_dir)})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), lines
    assert not lab_dir.exists()
    assert not any(report_dir.iterdir())


@pytest.mark.parametrize(("content", "message"), [(c, m) for c, m, s in BAD if s],
                         ids=[_ids(c) for c in BAD if c[2]])
def test_the_schema_refuses_what_the_loader_refuses(content: str, message: str) -> None:
    assert schema_problems(yaml.safe_load(content)), message


# --- a good declaration over a provider ---------------------------------------------------------------


def declared_over(provider: str | Provider, text: str, mode: str | None = None) -> DeclaredProvider:
    inner = providers.load(provider) if isinstance(provider, str) else provider
    if mode is not None:
        inner.set_mode(mode)
    return DeclaredProvider(inner, parse(yaml.safe_load(HEAD + textwrap.dedent(text)), "my-lb.yaml"))


def test_the_file_overrides_value_by_value_and_says_which_values_are_its_own() -> None:
    generic = providers.load("generic").declared()
    provider = declared_over("generic", f"""
        declared:
          healthCheckInterval: {{value: 3, source: "{DOCS}/health"}}
          idleTimeout: 350
        """)
    declared = provider.declared()
    assert declared.health_check_interval == 3.0 and isinstance(declared.health_check_interval, float)
    assert declared.idle_timeout == 350.0
    assert dataclasses.replace(declared, health_check_interval=generic.health_check_interval,
                               idle_timeout=None) == generic
    assert provider.declared_for("Local") == provider.declared_for("Cluster") == declared
    sources = provenance_of(provider)
    assert sources["health_check_interval"] == {"from": FROM_DECLARATION, "source": f"{DOCS}/health"}
    assert sources["idle_timeout"] == {"from": FROM_DECLARATION}
    assert sources["healthy_threshold"] == sources["notes"] == {"from": FROM_PROVIDER}
    assert set(sources) == {f.name for f in dataclasses.fields(Declared)}
    # and what the file does not touch is the provider's
    assert provider.features() == providers.load("generic").features()
    assert provider.timeouts() == Timeouts()
    assert provenance_of(providers.load("generic"))["idle_timeout"] == {"from": FROM_PROVIDER}


def test_features_come_from_the_file_when_it_gives_them() -> None:
    provider = declared_over("metallb", "features: [LoadBalancerLifecycle, UDP]\n")
    assert provider.features() == {Feature.LOAD_BALANCER_LIFECYCLE, Feature.UDP}
    assert declared_over("generic", "features: []\n").features() == set()


def test_per_policy_values_override_the_providers_for_that_policy_only() -> None:
    gke = providers.load("gke")
    provider = declared_over("gke", f"""
        perPolicy:
          Cluster:
            healthCheckInterval: {{value: 10, source: "{DOCS}/shared-check"}}
        """)
    cluster = provider.declared_for("Cluster")
    assert cluster.health_check_interval == 10.0
    assert cluster.unhealthy_threshold == gke.declared_for("Cluster").unhealthy_threshold == 3
    assert provider.declared_for("Local") == gke.declared_for("Local")
    assert provider.declared() == gke.declared()
    sources = provider.provenance()
    assert sources["health_check_interval"] == {
        "from": FROM_PROVIDER,
        "perPolicy": {"Cluster": {"value": 10.0, "from": FROM_DECLARATION, "source": f"{DOCS}/shared-check"}}}


def test_per_mode_values_apply_in_that_mode_and_policy_values_come_last() -> None:
    text = """
        declared: {idleTimeout: 100}
        perMode: {ip: {idleTimeout: 200}}
        perPolicy: {Local: {idleTimeout: 300}}
        """
    instance, ip = declared_over("aws", text, "instance"), declared_over("aws", text, "ip")
    assert (instance.declared().idle_timeout, ip.declared().idle_timeout) == (100.0, 200.0)
    assert instance.declared_for("Local").idle_timeout == ip.declared_for("Local").idle_timeout == 300.0
    ip.set_mode("instance")
    assert ip.declared().idle_timeout == 100.0


def test_health_checks_false_alone_takes_the_interval_and_thresholds_to_zero() -> None:
    provider = declared_over("generic",
                             f"declared: {{healthChecks: {{value: false, source: '{DOCS}/hc'}}}}\n")
    declared = provider.declared()
    assert (declared.health_checks, declared.health_check_interval, declared.healthy_threshold,
            declared.unhealthy_threshold) == (False, 0.0, 0, 0)
    assert provider.provenance()["healthy_threshold"] == {"from": FROM_DECLARATION, "source": f"{DOCS}/hc"}


def test_health_checks_over_a_provider_without_them_need_their_values() -> None:
    with pytest.raises(UsageError, match=r"^my-lb.yaml: declared.healthChecks: true, but "
                                         r"healthCheckInterval is 0.0 \(the metallb provider's\): "
                                         r"give healthCheckInterval > 0 too$"):
        declared_over("metallb", "declared: {healthChecks: true}\n")
    provider = declared_over("metallb", """
        declared: {healthChecks: true, healthCheckInterval: 5, healthyThreshold: 2, unhealthyThreshold: 3}
        """)
    assert provider.declared().time_to_unhealthy == 15.0


def test_timeouts_from_the_file_are_defaults_that_timeout_still_overrides() -> None:
    provider = declared_over("generic", "timeouts: {lb_create: 300, request: 5}\n")
    assert (provider.timeouts().lb_create, provider.timeouts().request) == (300.0, 5.0)
    assert provider.timeouts().lb_delete == Timeouts().lb_delete
    assert provider.timeouts().with_overrides(["lb_create=20s"]).lb_create == 20.0


def test_ip_mode_is_the_files_where_it_changes_the_providers() -> None:
    ref = ServiceRef("ns", "svc")
    assert declared_over("generic", "declared: {ipMode: Proxy}\n").ip_mode(ref) == "Proxy"

    class PerService(Provider):
        name = "per-service"

        def features(self) -> set[Feature]:
            return set()

        def declared(self) -> Declared:
            return Declared(health_check_interval=1.0, healthy_threshold=1, unhealthy_threshold=1,
                            idle_timeout=None)

        def ip_mode(self, service: ServiceRef) -> str:
            return "Proxy"  # as the lab's nodeport mode: decided per Service

    assert declared_over(PerService(), "declared: {ipMode: VIP}\n").ip_mode(ref) == "Proxy"


def test_the_wrapper_hands_every_other_provider_method_to_the_provider() -> None:
    """A Provider method the wrapper did not define would answer from the base class (NotSupported,
    defaults), not from the provider it wraps."""
    methods = [name for name, member in inspect.getmembers(Provider)
               if not name.startswith("_") and callable(member)]
    missing = [name for name in [*methods, "mode", "api", "options"] if name not in DeclaredProvider.__dict__]
    assert missing == []

    class Own(GenericProvider):
        extra = "the provider's own attribute"

    wrapped = declared_over(Own(), "declared: {}\n")
    assert wrapped.extra == "the provider's own attribute"
    wrapped.configure(None, {})
    assert wrapped.api is None and wrapped.options == {}
    with pytest.raises(UsageError, match="the generic provider knows the options none"):
        wrapped.configure(None, {"x": "y"})


def test_the_plugin_applies_the_declaration_to_the_runs_provider(tmp_path: Path) -> None:
    from lbconform.pytest_plugin import load_provider

    (tmp_path / "d.yaml").write_text(HEAD + "declared: {idleTimeout: 42}\n")
    given = {"--provider": "generic", "--mode": None, "--declaration": str(tmp_path / "d.yaml")}
    provider = load_provider(SimpleNamespace(getoption=given.get))  # type: ignore[arg-type]
    assert isinstance(provider, DeclaredProvider) and provider.declared().idle_timeout == 42.0
    given["--declaration"] = str(tmp_path / "nope.yaml")
    with pytest.raises(pytest.UsageError, match="no such file"):
        load_provider(SimpleNamespace(getoption=given.get))  # type: ignore[arg-type]


SUITE = """
import pytest
from lbconform.features import Feature

@pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)
def test_core():
    pass

@pytest.mark.features(Feature.BACKEND_POOL)
def test_pool():
    pass
"""


def test_the_suites_run_what_the_files_features_claim(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    pytester.makefile(".yaml", lb=HEAD + "features: [BackendPool]\n")
    result = pytester.runpytest_subprocess("--provider", "generic", "--declaration", "lb.yaml",
                                           "--profile", "core", "--profile", "extended", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*not supported: LoadBalancerLifecycle*"])


def test_run_hands_the_declaration_to_the_suites_as_an_absolute_path(tmp_path: Path) -> None:
    argv = pytest_argv(RunOptions(declaration="my-lb.yaml", provider="generic", report_dir=tmp_path))
    assert argv[argv.index("--declaration") + 1] == str(Path("my-lb.yaml").resolve())


def test_the_report_takes_the_implementation_from_the_file_where_the_flags_do_not(tmp_path: Path) -> None:
    from lbconform import pytest_plugin

    (tmp_path / "d.yaml").write_text(HEAD + "implementation: {organization: Acme, project: acme-lb, "
                                            "version: '2.0'}\ndeclared: {idleTimeout: {value: 60, "
                                            f"source: '{DOCS}/idle'}}}}\n")
    options = {"--provider": "generic", "--mode": None, "--declaration": str(tmp_path / "d.yaml"),
               "--implementation-organization": None, "--implementation-project": "flag-lb",
               "--implementation-url": None, "--implementation-version": None, "--implementation-contact": [],
               "--profile": ["core"]}
    config = SimpleNamespace(getoption=options.get, stash={})
    provider = pytest_plugin.load_provider(config)  # type: ignore[arg-type]
    target = SimpleNamespace(provider=provider, kind="cluster", kubernetes_version=lambda: "v1.36.3",
                             node_addresses=lambda: {"n1": "10.0.0.1"}, timeouts=provider.timeouts())
    config.stash.update({pytest_plugin._TARGET: target, pytest_plugin._RUN_ID: "r1"})
    info = pytest_plugin.run_info(config)  # type: ignore[arg-type]
    assert info.implementation == Implementation("Acme", "flag-lb", "", "2.0", ())
    assert info.declared["idle_timeout"] == 60.0
    assert info.declared_sources["idle_timeout"] == {"from": FROM_DECLARATION, "source": f"{DOCS}/idle"}


# --- lbconform declaration show: every installed provider, loaded back unchanged --------------------------


def provider_modes() -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for name in sorted(providers.available()):
        modes = providers.load(name).modes
        out += [(name, None)] + ([(name, m) for m in modes] if len(modes) > 1 else [])
    return out


def show(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert cli.main(["declaration", "show", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("name", "mode"), provider_modes())
def test_show_prints_a_declaration_that_loads_back_unchanged(name: str, mode: str | None,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = show(capsys, "--provider", name, *(["--mode", mode] if mode else []))
    doc = yaml.safe_load(text)
    assert schema_problems(doc) == []
    declaration = parse(doc, f"{name}.yaml")
    assert render(declaration) == text[text.index("apiVersion:"):]
    provider = providers.load(name)
    if mode:
        provider.set_mode(mode)
    wrapped = declared_over(name, text.split("kind: Declaration\n", 1)[1], mode)
    assert wrapped.declared() == provider.declared()
    for policy in ("Cluster", "Local"):
        assert wrapped.declared_for(policy) == provider.declared_for(policy)
    assert (wrapped.features(), wrapped.timeouts()) == (provider.features(), provider.timeouts())
    assert list(doc["declared"]) == list(FIELDS.values())  # complete: every field


def test_show_gives_a_policys_values_where_the_provider_varies_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    gke = yaml.safe_load(show(capsys, "--provider", "gke"))
    assert gke["declared"]["healthCheckInterval"] == 3.0
    assert gke["perPolicy"]["Cluster"]["healthCheckInterval"] == 8.0
    assert "Local" not in gke["perPolicy"]
    assert "perPolicy" not in yaml.safe_load(show(capsys, "--provider", "generic"))


def test_show_of_an_unknown_provider_or_mode_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["declaration", "show", "--provider", "nope"]) == 2
    assert capsys.readouterr().err.startswith("lbconform: error: no provider named 'nope'")
    assert cli.main(["declaration", "show", "--provider", "aws", "--mode", "turbo"]) == 2
    assert "--mode 'turbo': the aws provider has modes instance, ip" in capsys.readouterr().err


def test_check_says_how_much_is_the_files_own(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text(json.dumps({"apiVersion": "lbconform.io/v1alpha1", "kind": "Declaration",
                                                 "declared": {"idleTimeout": 60, "idleReset": True}}))
    assert cli.main(["declaration", "check", str(tmp_path / "d.json")]) == 0
    assert "2 of 15 declared values its own, features the provider's" in capsys.readouterr().out


# --- the schema is the format's ------------------------------------------------------------------------


def test_the_schema_names_what_the_code_names() -> None:
    doc = schema()
    assert list(doc["$defs"]["declaredValues"]["properties"]) == list(FIELDS.values())
    assert doc["$defs"]["feature"]["enum"] == [f.value for f in Feature]
    assert doc["$defs"]["seconds"]["maximum"] == MAX_SECONDS
    timeouts = doc["properties"]["timeouts"]["properties"]
    assert {name: spec["maximum"] for name, spec in timeouts.items()} == {
        name: maximum for name, _, maximum, _ in Timeouts().describe()}


# --- the worked example --------------------------------------------------------------------------------


def test_the_example_over_the_generic_provider_claims_what_the_lab_provider_does() -> None:
    lab = providers.load("lab")
    example = apply_declaration(providers.load("generic"), EXAMPLE)
    assert example.declared() == lab.declared()
    for policy in ("Cluster", "Local"):
        assert example.declared_for(policy) == lab.declared_for(policy)
    assert (example.features(), example.timeouts()) == (lab.features(), lab.timeouts())
    sources = example.provenance()
    assert sources["health_check_interval"] == {"from": FROM_DECLARATION,
                                                "source": "docs/lab.md#the-reference-load-balancer"}
    assert all(s["from"] == FROM_DECLARATION for s in sources.values())
    assert example.declaration.implementation["project"] == "reference LB (the lab's)"
    assert schema_problems(yaml.safe_load(EXAMPLE.read_text())) == []


def test_the_example_holds_the_values_show_prints(capsys: pytest.CaptureFixture[str]) -> None:
    def plain(declaration: Declaration) -> dict[str, Any]:
        doc = to_document(declaration)
        doc.pop("implementation", None)
        doc.pop("interface", None)  # how to talk to it, which a provider says in code
        doc["declared"] = {k: v["value"] if isinstance(v, dict) and "value" in v else v
                           for k, v in doc["declared"].items()}
        return doc

    shown = parse(yaml.safe_load(show(capsys, "--provider", "lab")), "lab")
    assert plain(load(EXAMPLE)) == plain(shown)


# --- the report says where each value came from --------------------------------------------------------


def test_the_report_carries_the_sources_and_stays_valid(tmp_path: Path) -> None:
    provider = declared_over("gke", f"""
        declared:
          idleTimeout: {{value: 350, source: "{DOCS}/idle"}}
        perPolicy:
          Local: {{unhealthyThreshold: {{value: 4, source: "{DOCS}/local"}}}}
        """)
    run = RunInfo(implementation=Implementation("Acme", "acme-lb", "", "2.0"), provider="gke", mode="default",
                  target="cluster", kubernetes_version="v1.36.3", nodes=("n1",), date="2026-01-02T03:04:05Z",
                  lbconform_version="0.1.0", run_id="r1", profiles=("core",),
                  declared=dataclasses.asdict(provider.declared()), declared_sources=provenance_of(provider),
                  timeouts=dataclasses.asdict(provider.timeouts()))
    result = TestResult("suites/test_x.py::t", "test_x::t", "", ("LoadBalancerLifecycle",), "passed", 1.0)
    doc = conformance.build([result], [], run)
    conformance.write(tmp_path / "r.yaml", doc)
    written = yaml.safe_load((tmp_path / "r.yaml").read_text())
    assert report_schema.verify(written) == []
    assert written["declaredSources"]["idle_timeout"] == {"from": "declaration", "source": f"{DOCS}/idle"}
    assert written["declaredSources"]["unhealthy_threshold"] == {
        "from": "provider",
        "perPolicy": {"Local": {"value": 4, "from": "declaration", "source": f"{DOCS}/local"}}}
    assert list(written).index("declaredSources") == list(written).index("declared") + 1
    # a report of a run before declaration files, without declaredSources, is still valid
    del written["declaredSources"]
    assert report_schema.verify(written) == []
    written["declaredSources"] = {"idle_timeout": {"from": "a blog post"}}
    assert report_schema.verify(written)[0].startswith("declaredSources.idle_timeout.from:")

    sheet = datasheet.render([], run)
    assert f"- `idle_timeout`: 350 (declaration, [source]({DOCS}/idle))" in sheet
    assert "- `healthy_threshold`: 1 (provider)" in sheet
    assert f"  - externalTrafficPolicy Local: 4 (declaration, [source]({DOCS}/local))" in sheet
    assert "notes" not in sheet
