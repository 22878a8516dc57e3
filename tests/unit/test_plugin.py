"""The plugin's feature gating, on synthetic suites run by pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest
from lbconform.features import Feature

@pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)
def test_core(record_property):
    pass

@pytest.mark.features(Feature.BACKEND_POOL)
def test_pool():
    pass

@pytest.mark.features(Feature.NODE_FAILURE)
def test_chaos():
    pass
"""


def test_profiles_select_and_unsupported_is_not_skipped_silently(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    result = pytester.runpytest_subprocess(
        "--provider", "generic", "--profile", "core", "--profile", "extended", "-rs")
    result.assert_outcomes(passed=1, skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*not supported: BackendPool*"])


def test_exempt_and_claimed_features(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    result = pytester.runpytest_subprocess("--provider", "lab", "--profile", "core", "--exempt-features",
                                "LoadBalancerLifecycle", "-rs")
    result.assert_outcomes(skipped=1, deselected=2)
    result = pytester.runpytest_subprocess(
        "--provider", "generic", "--profile", "extended", "--features", "BackendPool")
    result.assert_outcomes(passed=1, deselected=2)


def test_a_suite_test_without_features_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_bare": "def test_bare():\n    pass\n"})
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_bare declares no features*"])


def test_unknown_feature_and_provider_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    result = pytester.runpytest_subprocess("--exempt-features", "Nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown feature 'Nope'*"])
    result = pytester.runpytest_subprocess("--provider", "nope")
    result.stderr.fnmatch_lines(["*no provider named 'nope'*"])


def test_tests_outside_suites_are_not_gated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


RUNTIME = """
import pytest
from lbconform.features import Feature
from lbconform.providers.base import NotSupported

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL)
def test_proxied():
    '''The backends see the client's address.'''
    raise NotSupported("the ingress is ipMode Proxy")

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL, Feature.BACKEND_POOL)
def test_pool_of_local():
    '''An extended test, whatever its core feature.'''

@pytest.mark.features(Feature.EXTERNAL_TRAFFIC_POLICY_LOCAL)
def test_broken():
    '''Fails.'''
    assert False
"""


def test_not_supported_at_run_time_and_one_profile_per_test(pytester: pytest.Pytester) -> None:
    import yaml

    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": RUNTIME})
    result = pytester.runpytest_subprocess("--provider", "lab", "--report-dir", "out", "-n", "2", "-rs")
    result.assert_outcomes(failed=1, skipped=1)  # the extended test is deselected (xdist does not count it)
    result.stdout.fnmatch_lines(["*not supported: the ingress is ipMode Proxy*"])
    doc = yaml.safe_load((pytester.path / "out" / "conformance-report.yaml").read_text())
    (core,) = doc["profiles"]
    assert core["tests"]["notSupported"] == ["test_suite::test_proxied"]
    assert core["tests"]["failed"] == ["test_suite::test_broken"]
    assert core["features"]["failed"] == ["ExternalTrafficPolicyLocal"]


ORDERED = """
import pytest
from lbconform.features import Feature

pytestmark = pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)

def test_first():
    pass

@pytest.mark.exclusive
def test_alone():
    pass

def test_last():
    pass
"""


def test_exclusive_tests_run_first_and_the_rest_keep_their_order(pytester: pytest.Pytester) -> None:
    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_a": ORDERED, "suites/test_b": ORDERED})
    result = pytester.runpytest_subprocess("--provider", "generic", "--collect-only", "-q")
    names = [line.split("::")[-1] for line in result.stdout.lines if "::" in line]
    assert names == ["test_alone", "test_alone", "test_first", "test_last", "test_first", "test_last"]


def test_the_report_dir_gets_the_runs_evidence_with_its_options(pytester: pytest.Pytester) -> None:
    """The plugin hands the collector the run's options: run.json keeps them, but the kubeconfig (here one
    that is not there, so that the run's facts are never asked of a cluster), and copies the declaration."""
    import json

    from lbconform.declaration import show

    pytester.mkdir("suites")
    pytester.makepyfile(**{"suites/test_suite": SUITE})
    declaration = pytester.path / "ours.yaml"
    declaration.write_text(show("generic"))
    result = pytester.runpytest_subprocess(
        "--provider", "generic", "--kubeconfig", str(pytester.path / "absent"), "--declaration",
        str(declaration), "--report-dir", "out", "--profile", "core", "--exempt-features", "UDP",
        "--lbconform-timeout", "lb_create=10m", "-n", "2", "-k", "core or pool")
    result.assert_outcomes(passed=1)
    evidence = pytester.path / "out" / "evidence"
    assert (evidence / "declaration.yaml").read_text() == declaration.read_text()
    options = json.loads((evidence / "run.json").read_text())["options"]
    assert "kubeconfig" not in options and options["declaration"] == "declaration.yaml"
    assert (options["provider"], options["profile"]) == ("generic", ["core"])
    assert (options["exempt_features"], options["timeout"]) == (["UDP"], ["lb_create=10m"])
    assert (options["workers"], options["keyword"]) == (2, "core or pool")
    [line] = (evidence / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["nodeid"] == "suites/test_suite.py::test_core"
