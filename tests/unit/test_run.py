"""``lbconform run``: every bad input is one line, exit 2, and nothing is made (no lab booted)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbconform.run import RunOptions, pytest_argv

BAD_INPUT = [
    (["--provider", "aks"], "no provider named 'aks'"),
    (["--mode", "turbo"], "--mode 'turbo': the lab provider has modes node, nodeport, pod"),
    (["--profile", "gold"], "unknown profile 'gold': profiles are core, extended, chaos"),
    (["--features", "Teleport"], "unknown feature 'Teleport'"),
    (["--timeout", "lb_create=soon"], "not a duration: 'soon'"),
    (["--timeout", "coffee=5m"], "--timeout 'coffee=5m': use NAME=DURATION with NAME one of lb_create"),
    (["-n", "0"], "-n 0: the number of test processes must be at least 1"),
    (
        ["--kubeconfig", "/nonexistent/kubeconfig", "--provider", "generic"],
        "--kubeconfig /nonexistent/kubeconfig: no such file",
    ),
    (["--kubeconfig", __file__, "--provider", "lab"], "the lab provider reads the lab's own load balancer"),
    (["--kubeconfig", __file__], "with --kubeconfig, name the implementation's provider with --provider"),
    (["--client-netns", "lbc-no-such-ns"], "--client-netns lbc-no-such-ns: no such network namespace"),
    (["--context", "prod"], "--context needs --kubeconfig"),
    (["--provider-option", "flavour"], "--provider-option 'flavour': use NAME=VALUE"),
    (
        ["--provider", "kind", "--provider-option", "flavour=x"],
        "--provider-option flavour: the kind provider",
    ),
    (["--profile", "chaos"], "the chaos profile kills, drains and restarts nodes: add --allow-disruptive"),
    (["--run-id", "CI_run-1"], "--run-id 'CI_run-1': use 1 to 16 lowercase letters and digits"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_line_and_makes_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    # A lab directory of this test's own: `make test` runs the lab tests beside the unit tests,
    # and they boot and end labs at the default directory while this runs.
    lab_dir = tmp_path / "lab"
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "lbconform.cli", "run", "--report-dir", str(report_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "LBCONFORM_LAB_DIR": str(lab_dir)},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbconform: error: ") and message in lines[0], lines
    assert not lab_dir.exists()
    assert not any(report_dir.iterdir())


def test_pytest_argv_carries_every_choice() -> None:
    opts = RunOptions(
        kubeconfig="/k",
        context="c",
        provider="generic",
        mode="m",
        profile=["core", "extended"],
        features=["UDP"],
        exempt_features=["SourceRanges"],
        timeout=["lb_create=5m"],
        provider_option=["a=b"],
        workers=3,
        report_dir=Path("/r"),
        project="p",
        implementation_version="",
        contact=["me"],
        client_netns="ns1",
        pytest_args=["-k", "x"],
        allow_disruptive=True,
        run_id="ci1234",
    )
    argv = pytest_argv(opts)
    assert "--allow-disruptive" in argv
    pairs = set(itertools.pairwise(argv))
    for pair in [
        ("--provider", "generic"),
        ("--profile", "core"),
        ("--profile", "extended"),
        ("--features", "UDP"),
        ("--exempt-features", "SourceRanges"),
        ("--lbconform-timeout", "lb_create=5m"),
        ("--provider-option", "a=b"),
        ("-n", "3"),
        ("--kubeconfig", "/k"),
        ("--context", "c"),
        ("--mode", "m"),
        ("--implementation-project", "p"),
        ("--implementation-contact", "me"),
        ("--report-dir", "/r"),
        ("--alluredir", "/r/allure-results"),
        ("--junitxml", "/r/junit.xml"),
        ("--run-id", "ci1234"),
        ("--client-netns", "ns1"),
    ]:
        assert pair in pairs, pair
    assert "--implementation-version" not in argv
    assert argv[-2:] == ["-k", "x"]


def test_the_suites_pytest_reads_back_every_option_lbconform_run_was_given() -> None:
    """One table of options: whatever ``lbconform run`` parses reaches the plugin's option of the
    same dest with the same value (parsed here by a parser built as the plugin builds its own)."""
    import argparse

    from lbconform import options

    cli, plugin = argparse.ArgumentParser(), argparse.ArgumentParser()
    options.add_all(cli.add_argument, pytest=False)
    options.add_all(plugin.add_argument, pytest=True)
    given: list[str] = []
    for o in options.RUN_OPTIONS:
        # A path is resolved from the user's folder: an absolute one stays as it is.
        one = f"/{o.dest}" if o.dest in ("kubeconfig", "declaration") else f"{o.dest}-1"
        given += [o.flag] if o.switch else [o.flag, one] + ([o.flag, f"{o.dest}-2"] if o.repeat else [])
    values = vars(cli.parse_args(given))
    argv = pytest_argv(RunOptions(**values))
    back = vars(plugin.parse_args(_plugin_args(argv)))
    for o in options.RUN_OPTIONS:
        assert back[o.in_pytest.lstrip("-").replace("-", "_")] == values[o.dest], o.flag


def _plugin_args(argv: list[str]) -> list[str]:
    """The arguments of ``pytest_argv`` that are run options (pytest's own left out)."""
    from lbconform import options

    names = {o.in_pytest for o in options.RUN_OPTIONS}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg in names:
            switch = next(o.switch for o in options.RUN_OPTIONS if o.in_pytest == arg)
            out += [arg] if switch else [arg, argv[i + 1]]
    return out


def test_a_lab_provider_must_meet_the_load_balancer_the_lab_runs() -> None:
    from lbconform.errors import UsageError
    from lbconform_lab.local import check_lab_lb, lab_lb_for

    check_lab_lb("lab", "reference")
    check_lab_lb("metallb", "metallb")
    check_lab_lb("generic", "metallb")  # a provider the lab does not run is the user's choice
    with pytest.raises(UsageError, match="runs the metallb load balancer, not reference: use --provider"):
        check_lab_lb("lab", "metallb")
    with pytest.raises(UsageError, match="--lb metallb"):
        check_lab_lb("metallb", "reference")
    assert [lab_lb_for(p) for p in ("metallb", "lab", "kind", "kube-vip")] == [
        "metallb", "reference", "reference", "kube-vip"]
    with pytest.raises(UsageError, match="runs the kube-vip load balancer, not metallb"):
        check_lab_lb("metallb", "kube-vip")
