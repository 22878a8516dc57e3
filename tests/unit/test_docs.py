"""The user documentation says what is true now: the suites page is the suites' own, the README
stays a quick start, links lead somewhere, no page reads as a run journal (commit hashes), and the
tables that mirror the code (options, timeouts, profiles, providers, defects) name what the code
names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lbconform import options, providers
from lbconform.config import Timeouts
from lbconform.features import PROFILES
from lbconform.resources import data_dir
from lbconform.suitesdoc import SuitesDocError, generate, read_suites
from lbconform_lab.lb.params import DEFECTS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, ROOT / "reports" / "README.md", *sorted(DOCS.glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEXLIKE = re.compile(r"\b[0-9a-f]{7,40}\b")


STALE = "docs/suites.md is stale: run python -m lbconform.suitesdoc --write docs/suites.md"


def test_the_suites_page_is_the_generators_output() -> None:
    page = (DOCS / "suites.md").read_text(encoding="utf-8")
    assert page == generate(), STALE


def test_the_suites_page_lists_exactly_the_tests_pytest_collects() -> None:
    every_profile = [a for p in PROFILES for a in ("--profile", p)]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", str(data_dir("suites")), "--collect-only", "-q",
         "-p", "no:cacheprovider", "-p", "no:locust", "--provider", "generic", *every_profile],
        check=False, cwd=data_dir("suites").parent, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})  # -v would change the lines
    assert collected.returncode == 0, collected.stdout + collected.stderr
    theirs = {line.removeprefix("suites/") for line in collected.stdout.splitlines() if "::" in line}
    ours = set()
    for module in read_suites(data_dir("suites")):
        for test in module.tests:
            name = f"{module.name}.py::{test.name}"
            ours |= {f"{name}[{i}]" for i in test.ids} if test.ids else {name}
    assert ours == theirs


FAKE_SUITE = '''"""A fake area."""

import pytest

from lbconform.features import Feature

UDP = Feature.UDP


@pytest.mark.features(Feature.LOAD_BALANCER_LIFECYCLE)
def test_documented() -> None:
    """It does what it says."""


@pytest.mark.features(UDP)
@pytest.mark.parametrize("where", ["here", "there"])
def test_through_an_alias(where: str) -> None:
    """An alias of a feature is read, and so are literal parameters."""


def test_without_features() -> None:
    """It declares nothing."""


@pytest.mark.features(Feature.UDP)
def test_without_a_docstring() -> None:
    pass
'''


def test_a_suite_test_without_features_or_docstring_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "test_fake.py").write_text(FAKE_SUITE)
    with pytest.raises(SuitesDocError) as raised:
        read_suites(tmp_path)
    problems = str(raised.value).splitlines()
    assert len(problems) == 2, problems
    assert "test_without_features declares no features: add @pytest.mark.features" in problems[0]
    assert "test_without_a_docstring has no docstring" in problems[1]
    assert problems[0].startswith(f"{tmp_path / 'test_fake.py'}:")


def test_a_suite_module_as_the_generator_reads_it(tmp_path: Path) -> None:
    fake = FAKE_SUITE.split("\n\ndef test_without_features", maxsplit=1)[0] + "\n"
    (tmp_path / "test_fake.py").write_text(fake)
    [module] = read_suites(tmp_path)
    assert module.name == "test_fake" and module.intro == "A fake area."
    documented, aliased = module.tests
    assert (documented.doc, documented.profile) == ("It does what it says.", "core")
    assert [f.value for f in aliased.features] == ["UDP"]
    assert (aliased.profile, aliased.ids) == ("extended", ("here", "there"))


def test_the_readme_is_a_quick_start() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to files that do not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_commit(page: Path) -> None:
    """Docs state what is true now; a commit hash belongs to a run journal, not to them."""
    hashes = [t for t in HEXLIKE.findall(page.read_text(encoding="utf-8"))
              if re.search(r"[0-9]", t) and re.search(r"[a-f]", t)]
    assert not hashes, f"{page.relative_to(ROOT)} names what looks like commits: {hashes}"


def test_every_run_option_is_documented() -> None:
    running = (DOCS / "running.md").read_text(encoding="utf-8")
    flags = [o.flag for o in options.RUN_OPTIONS] + ["--workers", "--report-dir", "--keep-lab"]
    assert not [f for f in flags if f"`{f}" not in running and f"{f}`" not in running]


def test_the_timeouts_table_is_the_codes() -> None:
    running = (DOCS / "running.md").read_text(encoding="utf-8")
    for name, default, maximum, _ in Timeouts().describe():
        row = rf"^\| `{name}` \| {default:g} s \| \d+ s \| {maximum:g} s \|"
        assert re.search(row, running, re.MULTILINE), name


def test_the_readmes_profile_table_is_the_codes() -> None:
    readme = README.read_text(encoding="utf-8")
    for name, features in PROFILES.items():
        assert f"| {name} | {', '.join(f.value for f in features)} |" in readme, name


def test_every_provider_is_documented() -> None:
    page = (DOCS / "providers.md").read_text(encoding="utf-8")
    assert not [name for name in providers.available() if f"| `{name}` |" not in page]


def test_every_defect_is_documented() -> None:
    lab = (DOCS / "lab.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| `([a-z-]+)` \| ", lab.split("## Defects", 1)[1].split("\n## ", 1)[0],
                            re.MULTILINE)
    assert sorted(documented) == sorted(DEFECTS)
