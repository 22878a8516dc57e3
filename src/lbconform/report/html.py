"""The HTML report people browse: Allure 3 run offline over a run's ``allure-results``.

This module owns the pinned Allure CLI (npm ``allure``, installed by ``make allure`` into
``$LBCONFORM_CACHE/allure-<version>/``; Allure 3 needs Node.js only, where Allure 2 needs a
JRE), the config it is run with, and the ``--html``/``--single-file``/``--open`` flags of
``lbconform report``. It writes ``<report-dir>/html/`` (served over HTTP: browsers block its
data fetches over ``file://``) and ``<report-dir>/html-single/index.html`` (one file with
everything inlined, which opens from disk: the CI artifact).

The config is built here rather than kept as an ``allurerc`` file because the report's name
depends on the run (the implementation in ``conformance-report.yaml``). Allure 3 takes it
from ``allurerc.json`` (``--config``): ``name``, ``plugins.awesome.options.singleFile`` and
``categories``. Allure 2's ``categories.json`` in the results folder only reaches Allure 3's
classic and allure2 plugins, not the default awesome one.

Categories sort failed and broken tests by whose fault they are: an LB defect (an assertion
failed, so the implementation misbehaved), an infrastructure error (the cluster, its API or
a wait that ran out of time) or a harness error (any other exception: a bug in lbconform).
allure-pytest marks AssertionError and ``pytest.fail`` *failed* and any other exception
*broken*, and its error message starts with the exception's module-qualified type; Allure
gives a test the first category whose matcher fits.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from lbconform.cache import cache_root
from lbconform.errors import LbconformError

log = logging.getLogger(__name__)

#: npm ``allure``, exactly as ``make allure`` installs it (the Makefile's ALLURE_VERSION).
ALLURE_VERSION: Final = "3.18.0"
HTML_DIR: Final = "html"
SINGLE_FILE_DIR: Final = "html-single"
#: Generous: a chaos run's results hold hundreds of attachments, and Allure copies each.
GENERATE_TIMEOUT: Final = 600.0

# The awesome plugin writes Google Analytics tags into index.html unconditionally (only the
# allure2 plugin honours ALLURE_NO_ANALYTICS): a report opened offline or in CI must not call out.
_ANALYTICS: Final = re.compile(
    r"<script[^>]*googletagmanager\.com[^>]*>\s*</script>\s*<script>(?:(?!</script>).)*?gtag\(.*?</script>",
    re.S)


@dataclass(frozen=True)
class Category:
    """One Allure 3 category rule: tests of these statuses whose error message matches.

    ``message`` is a JavaScript regular expression (no flags) tested against the whole message.
    """

    id: str
    name: str
    statuses: tuple[str, ...]
    message: str | None = None

    def rule(self) -> dict[str, Any]:
        matcher: dict[str, Any] = {"statuses": list(self.statuses)}
        if self.message is not None:
            matcher["message"] = self.message
        return {"id": self.id, "name": self.name, "matchers": [matcher]}


#: Errors from the cluster and the way to it rather than from the LB or from lbconform.
#: WaitTimeout is here because it is a wait for the cluster (pods, endpoints, deletion); a wait for
#: the LB raises LbWaitTimeout, which is an assertion and so never *broken*.
INFRASTRUCTURE_ERRORS: Final = (
    r"lbconform\.kube\.rawapi\.ApiError",
    r"kubernetes\.client\.exceptions\.ApiException",
    r"lbconform\.wait\.WaitTimeout",
    r"lbconform\.errors\.LabError",
    r"urllib3\.exceptions\.\w+",
    r"(?:[\w.]+\.)?(?:ConnectionError|ConnectionRefusedError|ConnectionResetError|ConnectionAbortedError"
    r"|BrokenPipeError|TimeoutError)",
)

_LB_DEFECTS: Final = "LB defects (an assertion failed: the implementation misbehaved)"

#: The order matters: Allure files a test under the first category that matches.
CATEGORIES: Final = (
    # Waits for the LB's own doing (an address within lb_create, a healthy set, traffic that
    # converges) raise LbWaitTimeout, an AssertionError: they are failed, not broken.
    Category("lb-defect", _LB_DEFECTS, ("failed",)),
    # The message is the exception's type, then ": " and its text when it has one.
    Category("infrastructure", "Infrastructure errors (cluster, API, timeouts)", ("broken",),
             rf"^(?:{'|'.join(INFRASTRUCTURE_ERRORS)})(?::|$)"),
    Category("harness", "Harness errors (an exception in lbconform)", ("broken",)),
)


def category_rules() -> list[dict[str, Any]]:
    """CATEGORIES as Allure 3 reads them; rules with one id merge, their matchers or-ed."""
    rules: dict[str, dict[str, Any]] = {}
    for c in CATEGORIES:
        rule = c.rule()
        if c.id in rules:
            rules[c.id]["matchers"] += rule["matchers"]
        else:
            rules[c.id] = rule
    return list(rules.values())


def allure_cli(root: Path | None = None) -> Path:
    """The pinned Allure CLI in the cache; a LbconformError saying what to run when it is absent."""
    cli = (root or cache_root()) / f"allure-{ALLURE_VERSION}" / "node_modules" / ".bin" / "allure"
    if not os.access(cli, os.X_OK):
        raise LbconformError(f"Allure {ALLURE_VERSION} is not installed (no {cli}): run `make setup`")
    return cli


def report_name(report_dir: Path) -> str:
    """``lbconform``, and the implementation under test when the conformance report names it."""
    from lbconform.report.collector import REPORT_FILE  # the collector imports pytest: not at CLI start

    path = report_dir / REPORT_FILE
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "lbconform"
    except (OSError, yaml.YAMLError) as exc:
        log.warning("report name without the implementation: cannot read %s: %s", path, exc)
        return "lbconform"
    impl = doc.get("implementation") if isinstance(doc, dict) else None
    if not isinstance(impl, dict):
        return "lbconform"
    parts = [str(impl.get(k) or "") for k in ("organization", "project", "version")]
    words = [p for p in parts if p and p != "unknown"]
    return f"lbconform: {' '.join(words)}" if words else "lbconform"


def allure_config(name: str, *, single_file: bool) -> dict[str, Any]:
    """The ``allurerc.json`` for one report."""
    return {
        "name": name,
        "plugins": {"awesome": {"options": {"singleFile": single_file}}},
        "categories": {"rules": category_rules()},
    }


def results_dir(report_dir: Path) -> Path:
    """The run's Allure results; a LbconformError when there are none."""
    from lbconform.report.collector import ALLURE_DIR

    results = report_dir / ALLURE_DIR
    if not any(results.glob("*-result.json")):
        raise LbconformError(f"no Allure results in {results}/: run `lbconform run` first, or name its "
                             "--report-dir")
    return results


def generate(report_dir: Path, *, single_file: bool = False, cli: Path | None = None) -> Path:
    """Build the HTML report of ``report_dir`` and return its ``index.html``.

    The multi-file report goes to ``html/``, the single-file one to ``html-single/``; each
    replaces the previous build whole (Allure itself leaves stale files in its output), and
    a failed build leaves the previous one in place.
    """
    # Allure runs in a temporary working directory of its own: every path it gets is absolute.
    report_dir = report_dir.resolve()
    results = results_dir(report_dir)
    cli = cli or allure_cli()
    if shutil.which("node") is None:
        raise LbconformError("node is not on PATH: Allure 3 runs on Node.js 20 or later")
    final = report_dir / (SINGLE_FILE_DIR if single_file else HTML_DIR)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=report_dir))
    try:
        with tempfile.TemporaryDirectory(prefix="lbconform-allure-") as work:
            config = Path(work) / "allurerc.json"
            config.write_text(json.dumps(allure_config(report_name(report_dir), single_file=single_file),
                                         indent=2), encoding="utf-8")
            argv = [str(cli), "generate", "--config", str(config), "--output", str(staging),
                    str(results.resolve())]
            log.info("running %s", " ".join(argv))
            # The cwd keeps Allure from finding an allurerc or results folders of the caller's.
            env = dict(os.environ, ALLURE_NO_ANALYTICS="true")
            try:
                proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                                      timeout=GENERATE_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                raise LbconformError(f"allure generate did not finish in {GENERATE_TIMEOUT:g}s") from None
        log.debug("allure generate: %s%s", proc.stdout, proc.stderr)
        index = staging / "index.html"
        if proc.returncode != 0 or not index.is_file():
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise LbconformError(f"allure generate failed (exit {proc.returncode}): "
                                 f"{lines[-1] if lines else 'no index.html written'}")
        _strip_analytics(index)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return final / "index.html"


def _strip_analytics(index: Path) -> None:
    html = index.read_text(encoding="utf-8")
    stripped, count = _ANALYTICS.subn("", html)
    if count:
        index.write_text(stripped, encoding="utf-8")
    elif "googletagmanager" in html:
        log.warning("%s still loads Google Analytics: the pattern no longer matches Allure's", index)


# The CLI side: lbconform.cli adds these flags to its `report` subcommand and calls run_html.


class _OpenAction(argparse.Action):
    """``--open`` also asks for the single-file report: the variant that opens from disk."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)
        namespace.single_file = True


def add_html_arguments(parser: argparse.ArgumentParser) -> None:
    """The HTML report's flags; the parser supplies ``--report-dir``."""
    parser.add_argument("--html", action="store_true",
                        help=f"build the HTML report in REPORT_DIR/{HTML_DIR}/ (serve it: `allure open` "
                             "or any web server)")
    parser.add_argument("--single-file", action="store_true",
                        help=f"build the one-file HTML report in REPORT_DIR/{SINGLE_FILE_DIR}/ (for CI "
                             "artifacts; opens from disk)")
    parser.add_argument("--open", action=_OpenAction, nargs=0, default=False,
                        help="build the one-file report and open it in the default browser, if there is one")


def run_html(args: argparse.Namespace) -> int:
    """Build what the flags ask for and print where it is; the CLI's side, so it prints."""
    report_dir = Path(args.report_dir)
    built: list[Path] = []
    if args.html:
        built.append(generate(report_dir))
    if args.single_file:
        built.append(generate(report_dir, single_file=True))
    for index in built:
        print(f"html report: {index}")
    if args.open and built:
        _open(built[-1])
    return 0


def _open(index: Path) -> None:
    opener = shutil.which("xdg-open")
    if opener is None or not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        print(f"no browser to open here: open {index.resolve().as_uri()}")
        return
    try:
        subprocess.Popen([opener, index.resolve().as_uri()], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        print(f"could not start {opener} ({exc}): open {index.resolve().as_uri()}")
