"""The HTML report: real allure-pytest results, built by the pinned Allure 3, looked at in chromium.

The browser test drives Debian's headless chromium over the DevTools protocol (the report's
attachments open only on a click, which ``--dump-dom`` cannot do) and serves the report from
127.0.0.1, since the multi-file report fetches its data and browsers block that over file://.
Chromium resolves no other host, and the test checks that the report asked for none.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket  # websocket-client, a dependency of the kubernetes client

from lbconform.cli import parser
from lbconform.errors import LbconformError
from lbconform.report import html
from lbconform.wait import poll_until

ROOT = Path(__file__).resolve().parents[2]
#: A guard on each look at a page, not a measure: chromium renders the report's scripts slowly
#: while a lab runs beside (15 s ran out once in CI, on the overview's counts).
WAIT_SECONDS = 90
DIAGNOSTICS = "Service backend: no endpoints; events: SyncLoadBalancerFailed"
TIMELINE_SIZE = (64, 24)
CONFORMANCE_REPORT = """\
apiVersion: lbconform.io/v1alpha1
kind: ConformanceReport
implementation: {organization: Acme, project: Acme LB, url: '', version: v1.2.3, contact: []}
"""

SAMPLE = f'''\
from pathlib import Path

import allure


def test_timeline():
    png = Path(__file__).with_name("timeline.png").read_bytes()
    allure.attach(png, name="timeline", attachment_type=allure.attachment_type.PNG)
    allure.attach("lb_create 1.8 s", name="measurement lb_create",
                  attachment_type=allure.attachment_type.TEXT)


def test_wrong_backend():
    allure.attach({DIAGNOSTICS!r}, name="diagnostics", attachment_type=allure.attachment_type.TEXT)
    assert "backend-2" == "backend-1", "the VIP answered from a backend outside the Service"
'''

# One test per way a test goes wrong, and the category each must land in.
CATEGORY_SAMPLE = '''\
from lbconform.errors import LbconformError, LabError
from lbconform.kube.jig import LoadBalancerTimeout
from lbconform.kube.rawapi import ApiError
from lbconform.wait import WaitTimeout


def test_assertion():
    assert 1 == 2


def test_no_address():
    raise LoadBalancerTimeout("Service ns/backend to get an ingress address", 1.0, None, None)


def test_api_error():
    raise ApiError(500, "InternalError", "etcdserver: request timed out")


def test_wait_timeout():
    raise WaitTimeout("pods to be ready", 1.0, None, None)


def test_lab_down():
    raise LabError("the lab is not running")


def test_refused():
    raise ConnectionRefusedError(111, "Connection refused")


def test_bare_timeout():
    raise TimeoutError


def test_type_error():
    raise TypeError("unsupported operand type(s)")


def test_harness_error():
    raise LbconformError("a harness bug")
'''
EXPECTED_CATEGORIES = {
    "test_assertion": "lb-defect",
    "test_no_address": "lb-defect",
    "test_api_error": "infrastructure",
    "test_wait_timeout": "infrastructure",
    "test_lab_down": "infrastructure",
    "test_refused": "infrastructure",
    "test_bare_timeout": "infrastructure",
    "test_type_error": "harness",
    "test_harness_error": "harness",
}


@pytest.fixture
def allure_cli() -> Path:
    try:
        cli = html.allure_cli()
    except LbconformError as exc:
        pytest.skip(str(exc))
    if shutil.which("node") is None:
        pytest.skip("node is not installed (the Allure CLI runs on it)")
    return cli


@pytest.fixture
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed: `make setup` installs Debian's chromium")
    return path


def solid_png(width: int, height: int) -> bytes:
    """A one-colour RGB PNG, made by hand so that the browser check knows its size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x1f\x6f\xb4" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def run_sample(tmp_path: Path, source: str) -> Path:
    """Run ``source`` as a test module under allure-pytest; the report dir its results went to."""
    sample = tmp_path / "sample"
    sample.mkdir()
    (sample / "test_sample.py").write_text(source)
    (sample / "timeline.png").write_bytes(solid_png(*TIMELINE_SIZE))
    report_dir = tmp_path / "reports"
    # No lbconform plugin: the sample is plain allure-pytest, as the suites' results are.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:locust", "-p",
         "no:lbconform", "--alluredir", str(report_dir / "allure-results"), "test_sample.py"],
        cwd=sample, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some sample tests fail, on purpose
    return report_dir


def test_the_makefile_installs_the_pinned_allure() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^ALLURE_VERSION\s*:=\s*{re.escape(html.ALLURE_VERSION)}\s*$", makefile, re.M)


def test_a_missing_allure_says_to_run_make_setup(tmp_path: Path) -> None:
    with pytest.raises(LbconformError, match=r"Allure 3\.\d+\.\d+ is not installed .*run `make setup`"):
        html.allure_cli(tmp_path)


def test_no_results_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(LbconformError, match="no Allure results"):
        html.generate(tmp_path, cli=tmp_path / "allure")


def test_the_report_is_named_after_the_implementation(tmp_path: Path) -> None:
    assert html.report_name(tmp_path) == "lbconform"
    (tmp_path / "conformance-report.yaml").write_text(CONFORMANCE_REPORT)
    assert html.report_name(tmp_path) == "lbconform: Acme Acme LB v1.2.3"
    (tmp_path / "conformance-report.yaml").write_text(
        "implementation: {organization: unknown, project: unknown, version: unknown}\n")
    assert html.report_name(tmp_path) == "lbconform"


def test_open_builds_the_single_file_report() -> None:
    args = parser().parse_args(["report", "--open"])
    assert (args.open, args.single_file, args.html) == (True, True, False)


def test_report_html_builds_the_default_relative_report_dir(tmp_path: Path, allure_cli: Path) -> None:
    """As README shows it after `make run`: `lbconform report --html`, no other argument, from the
    directory that holds `reports/`."""
    report_dir = run_sample(tmp_path, SAMPLE)
    (report_dir / "conformance-report.yaml").write_text(CONFORMANCE_REPORT)
    done = subprocess.run([sys.executable, "-m", "lbconform.cli", "report", "--html"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert (report_dir / "html" / "index.html").is_file()
    assert f"html report: {report_dir / 'html' / 'index.html'}" in done.stdout


def test_failures_are_filed_as_lb_defect_infrastructure_or_harness(tmp_path: Path, allure_cli: Path) -> None:
    report_dir = run_sample(tmp_path, CATEGORY_SAMPLE)
    html.generate(report_dir, cli=allure_cli)
    tree = json.loads((report_dir / "html" / "widgets" / "categories.json").read_text())
    names = {rule["name"]: rule["id"] for rule in html.category_rules()}
    filed: dict[str, str] = {}

    def walk(node_id: str, category: str) -> None:
        node = tree["nodes"][node_id]
        if node["type"] == "tr":
            filed[node["name"]] = category
        for child in node.get("childrenIds", []):
            walk(child, category)

    for root in tree["roots"]:
        walk(root, names.get(tree["nodes"][root]["name"], tree["nodes"][root]["name"]))
    assert filed == EXPECTED_CATEGORIES


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """``directory`` over HTTP on 127.0.0.1, in a thread; yields the base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Browser:
    """Headless chromium over the DevTools protocol: navigate, evaluate, click, screenshot.

    Every host but 127.0.0.1 resolves to nothing, and ``requests`` lists every URL a page asked for.
    """

    def __init__(self, chromium: str, profile: Path) -> None:
        self.requests: list[str] = []
        self._id = 0
        self._proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--window-size=1280,1000", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            active = profile / "DevToolsActivePort"
            port = poll_until(lambda: active.is_file() and active.read_text().split()[:1],
                              timeout=20, description="chromium's DevTools port")[0]
            pages = json.loads(_get(f"http://127.0.0.1:{port}/json/list"))
            url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
            self._ws = websocket.create_connection(url, timeout=20, suppress_origin=True)
            self.call("Page.enable")
            self.call("Network.enable")
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("method") == "Network.requestWillBeSent":
                self.requests.append(msg["params"]["request"]["url"])
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, description: str, timeout: float = WAIT_SECONDS) -> Any:
        return poll_until(lambda: self.evaluate(expression), timeout=timeout, interval=0.1,
                          description=description)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


# What the pages are asked, in the report's own test ids (data-testid) rather than its CSS classes.
COUNT = "document.querySelector('[data-testid=metadata-item-{0}] [data-testid=metadata-value]')?.innerText"
OPEN_TEST = """(() => {{
  const leaf = [...document.querySelectorAll('[data-testid=tree-leaf]')]
    .find(l => l.querySelector('[data-testid=tree-leaf-title]')?.innerText === {0!r});
  if (!leaf) return false;
  leaf.click();
  return true;
}})()"""
EXPAND_ATTACHMENT = """(() => {{
  const header = [...document.querySelectorAll('[data-testid=test-result-attachment-header]')]
    .find(h => h.innerText.split('\\n').includes({0!r}));
  if (!header) return false;
  header.querySelector('button').click();
  return true;
}})()"""
ATTACHMENT_TEXT = ("[...document.querySelectorAll('[data-testid=code-attachment-content]')]"
                   ".map(e => e.innerText).join('\\n')")
TIMELINE_IMAGE = ("[...document.querySelectorAll('[data-testid=image-attachment-content] img')]"
                  ".filter(i => i.complete && i.naturalWidth > 0)"
                  ".map(i => [i.naturalWidth, i.naturalHeight])[0]")


def counts(browser: Browser) -> dict[str, str]:
    browser.wait_for(COUNT.format("total"), "the overview's counts")
    return {k: browser.evaluate(COUNT.format(k)) for k in ("total", "passed", "failed", "broken")}


def keep(path: Path) -> None:
    """Copy a screenshot to $LBCONFORM_ARTIFACTS, where CI collects what people look at."""
    artifacts = os.environ.get("LBCONFORM_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(artifacts) / path.name)


def test_the_report_shows_counts_diagnostics_and_timeline(
        tmp_path: Path, allure_cli: Path, chromium: str) -> None:
    report_dir = run_sample(tmp_path, SAMPLE)
    (report_dir / "conformance-report.yaml").write_text(CONFORMANCE_REPORT)
    assert html.run_html(argparse.Namespace(report_dir=str(report_dir), html=True, single_file=True,
                                            open=False)) == 0
    single = report_dir / "html-single"
    assert sorted(p.name for p in single.iterdir() if p.is_dir()) == []  # everything is in index.html
    for index in (report_dir / "html" / "index.html", single / "index.html"):
        assert "googletagmanager" not in index.read_text()

    browser = Browser(chromium, tmp_path / "chromium-profile")
    try:
        with serve(report_dir / "html") as base:
            browser.navigate(base)
            # (a) the overview counts one passed and one failed test, under the run's name
            assert counts(browser) == {"total": "2", "passed": "1", "failed": "1", "broken": None}
            assert browser.evaluate("document.title") == "lbconform: Acme Acme LB v1.2.3"

            # (b) the failing test's page: its category, and its diagnostics when opened
            browser.wait_for(OPEN_TEST.format("test_wrong_backend"), "the failing test in the tree")
            browser.wait_for(EXPAND_ATTACHMENT.format("diagnostics"), "the diagnostics attachment")
            assert DIAGNOSTICS in browser.wait_for(ATTACHMENT_TEXT, "the diagnostics' text")
            assert "Category: LB defects" in browser.evaluate("document.body.innerText")
            keep(browser.screenshot(tmp_path / "html-report-failed-test.png"))

            # (c) the passing test's page shows the timeline image, decoded at its size
            browser.navigate(base)
            browser.wait_for(OPEN_TEST.format("test_timeline"), "the passing test in the tree")
            browser.wait_for(EXPAND_ATTACHMENT.format("timeline"), "the timeline attachment")
            assert browser.wait_for(TIMELINE_IMAGE, "the timeline image to load") == list(TIMELINE_SIZE)
            keep(browser.screenshot(tmp_path / "html-report-timeline.png"))

            assert [u for u in browser.requests if not u.startswith((base, "blob:", "data:"))] == []

        # The single-file report opens from disk, with nothing to serve.
        browser.navigate(single.joinpath("index.html").as_uri())
        assert counts(browser) == {"total": "2", "passed": "1", "failed": "1", "broken": None}
    finally:
        browser.close()
