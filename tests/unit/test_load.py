"""Locust runs for real, on loopback: totals reach the harness, and every failure has its kind.

Every run is a real Locust process (no Locust is imported here) against a server in this
test process on 127.0.0.1: a healthy backend, one that resets, one that never answers, one
that closes, one that answers 500, and a port nobody listens on. The runs of the matrix
start together so that the whole file takes seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lbconform.errors import LoadError
from lbconform.load import (
    HTTP_KEEPALIVE,
    HTTP_NEW_CONNECTION,
    KINDS,
    TCP_LONG_LIVED,
    ChaosShape,
    Distributed,
    LoadResult,
    LoadSpec,
    kind_of_error,
    locust_command,
    locustfile,
    locustfiles,
    locustfiles_dir,
    run_load,
    start_load,
)
from lbconform.traffic.requests import CLOSED, REFUSED, RESET, TIMEOUT, WRONG
from lbconform.wait import poll_until

LOCUSTFILES = (HTTP_NEW_CONNECTION, HTTP_KEEPALIVE, TCP_LONG_LIVED)
USERS = 2
RUN_SECONDS = 3


# --- servers -----------------------------------------------------------------------------
class Backend(ThreadingHTTPServer):
    """An HTTP backend that counts the connections it accepted and the requests it answered."""

    daemon_threads = True

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.connections = 0
        self.requests = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client stopped mid-answer (Locust stops users mid-request): not the test's concern


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Backend

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_GET(self) -> None:
        body = b"backend-a" if self.server.status == 200 else b"broken"
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(body)))
        if self.headers.get("Connection", "").lower() == "close":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        with self.server.lock:
            self.server.requests += 1

    def log_message(self, *args: object) -> None:
        pass


class RawServer:
    """A TCP server that misbehaves in one way: ``reset`` (reads the request, then RST),
    ``silent`` (accepts, never answers) or ``close`` (reads the request, then closes in order).

    The reset comes after the request, while the client waits for its answer, as an LB's
    reset of a live flow does: a reset that races the client's first send can reach the
    client as a plain end of stream, which is a fact of sockets the suites meet with capture.
    """

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.held: list[socket.socket] = []
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.behaviour == "silent":
                self.held.append(conn)
            else:
                threading.Thread(target=self._read_then_close, args=(conn,), daemon=True).start()

    def _read_then_close(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            if self.behaviour == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
        for conn in self.held:
            conn.close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# --- the matrix: every locustfile against every server, all at once -----------------------
FAULTS = {"reset": RESET, "refused": REFUSED, "silent": TIMEOUT, "close": CLOSED, "http-500": WRONG}


@dataclass
class Cell:
    server: Backend | RawServer | None
    outcome: LoadResult | LoadError | None = None


def _spec(name: str, url: str) -> LoadSpec:
    # A 1 s request timeout makes the silent server's timeouts come within the run.
    return LoadSpec(name, url, users=USERS, run_seconds=RUN_SECONDS, request_timeout=1.0)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Cell]]:
    cells: dict[tuple[str, str], Cell] = {}
    for name in LOCUSTFILES:
        cells[name, "healthy"] = Cell(Backend())
        cells[name, "http-500"] = Cell(Backend(status=500))
        for behaviour in ("reset", "silent", "close"):
            cells[name, behaviour] = Cell(RawServer(behaviour))
        cells[name, "refused"] = Cell(None)
    with contextlib.ExitStack() as stack:
        runs = {}
        for (name, server), cell in cells.items():
            url = cell.server.url if cell.server is not None else closed_port_url()
            workdir = tmp_path_factory.mktemp(f"{name}-{server}")
            runs[name, server] = stack.enter_context(start_load(_spec(name, url), workdir=workdir))
        for key, run in runs.items():
            try:
                cells[key].outcome = run.wait()
            except LoadError as exc:
                cells[key].outcome = exc
        yield cells
    for cell in cells.values():
        if cell.server is not None:
            cell.server.close()


def _result(cell: Cell) -> LoadResult:
    if isinstance(cell.outcome, LoadError):
        raise cell.outcome
    assert cell.outcome is not None
    return cell.outcome


@pytest.mark.parametrize("name", LOCUSTFILES)
def test_healthy_backend_counts_every_request_and_no_failure(
        matrix: dict[tuple[str, str], Cell], name: str) -> None:
    """Against a healthy backend every request succeeds and Locust's total is what the backend served."""
    cell = matrix[name, "healthy"]
    result = _result(cell)
    assert isinstance(cell.server, Backend)
    assert result.requests > 0 and result.failures == 0
    assert set(result.failures_by_kind) == set(KINDS) and not any(result.failures_by_kind.values())
    # A user stopped mid-request leaves an answer Locust never counted: at most one per user.
    assert result.requests <= cell.server.requests <= result.requests + USERS
    assert 0 < result.duration <= RUN_SECONDS + 1
    assert result.requests_per_second == pytest.approx(result.requests / result.duration)


def test_new_connection_user_opens_a_connection_per_request(matrix: dict[tuple[str, str], Cell]) -> None:
    """The new-connection user never reuses a connection."""
    cell = matrix[HTTP_NEW_CONNECTION, "healthy"]
    assert isinstance(cell.server, Backend)
    assert cell.server.connections >= _result(cell).requests > USERS


@pytest.mark.parametrize("name", [HTTP_KEEPALIVE, TCP_LONG_LIVED])
def test_keepalive_users_hold_one_connection_each(matrix: dict[tuple[str, str], Cell], name: str) -> None:
    """The keep-alive and long-lived users send all their requests over one connection per user."""
    cell = matrix[name, "healthy"]
    assert isinstance(cell.server, Backend)
    assert _result(cell).requests > 2 * USERS
    assert cell.server.connections == USERS


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("name", LOCUSTFILES)
def test_every_failure_has_the_kind_of_its_fault(
        matrix: dict[tuple[str, str], Cell], name: str, fault: str) -> None:
    """Resets, refusals, timeouts, closes and HTTP errors are each counted as their own kind."""
    result = _result(matrix[name, fault])
    kind = FAULTS[fault]
    assert result.requests > 0
    assert result.failures == result.requests, "every request to a faulty server fails"
    assert result.failures_by_kind[kind] == result.failures, (result.failures_by_kind, result.errors[:3])
    assert all(e.error.startswith(f"{kind}: ") for e in result.errors)


# --- distributed, shape, stop, bounds ------------------------------------------------------
def test_distributed_master_counts_what_its_local_workers_sent(tmp_path: Path) -> None:
    """A master with two local workers reports the totals of both."""
    backend = Backend()
    try:
        users = 4
        spec = LoadSpec(HTTP_KEEPALIVE, backend.url, users=users, run_seconds=RUN_SECONDS)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        result = run_load(spec, workdir=tmp_path,
                          distributed=Distributed(expect_workers=2, local_workers=2, bind_port=port))
        assert result.requests > 0 and result.failures == 0
        # The backend served all four users (two per worker), and the master counted every
        # answer: had it missed one worker's reports, it would count about half.
        assert backend.connections == users
        assert result.requests <= backend.requests <= result.requests + users
    finally:
        backend.close()


def test_master_without_its_workers_is_a_load_error(tmp_path: Path) -> None:
    """A master that waited in vain for a worker fails the run with Locust's reason."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = LoadSpec(HTTP_KEEPALIVE, "http://127.0.0.1:9", users=1, run_seconds=1)
    with pytest.raises(LoadError, match=r"exited with 1.*Gave up waiting for workers"):
        run_load(spec, workdir=tmp_path, distributed=Distributed(
            expect_workers=2, local_workers=1, bind_port=port, worker_wait_seconds=1))


def test_chaos_shape_tells_the_harness_when_the_chaos_window_opens(tmp_path: Path) -> None:
    """The load shape ramps, holds, holds through the chaos window and ends, and says when."""
    backend = Backend()
    try:
        shape = ChaosShape(users=2, ramp_seconds=1, hold_seconds=1, chaos_seconds=2)
        with start_load(LoadSpec(HTTP_NEW_CONNECTION, backend.url, shape=shape), workdir=tmp_path) as run:
            chaos = run.wait_for_phase("chaos")
            served_before_chaos = backend.requests
            assert served_before_chaos > 0 and [p.name for p in run.phases()] == ["ramp", "hold", "chaos"]
            result = run.wait()
    finally:
        backend.close()
    assert [p.name for p in result.phases] == ["ramp", "hold", "chaos", "end"]
    starts = [p.at for p in result.phases]
    assert starts == sorted(starts) and result.phases[2] == chaos
    assert starts[2] - starts[0] == pytest.approx(shape.chaos_starts_after, abs=1.5)
    assert starts[3] - starts[2] == pytest.approx(shape.chaos_seconds, abs=1.5)
    assert result.requests > served_before_chaos and result.failures == 0
    assert result.phase_at(starts[2] + 0.1) == "chaos"


def test_stop_ends_the_run_early_and_still_counts(tmp_path: Path) -> None:
    """Stopping a run (SIGTERM) ends it before its time, on the signal (not killed after the grace),
    with its statistics written."""
    backend = Backend()
    try:
        spec = LoadSpec(HTTP_KEEPALIVE, backend.url, users=1, run_seconds=120)
        with start_load(spec, workdir=tmp_path) as run:
            # Locust starts in a second alone, in up to tens of seconds beside the lab tests.
            poll_until(lambda: backend.requests >= 3, timeout=60, description="Locust's first requests")
            result = run.stop()
            assert not run.main.running() and run.main.returncode != -signal.SIGKILL
    finally:
        backend.close()
    assert result.requests >= 3 and result.failures == 0
    assert result.ended_at - result.started_at < spec.run_seconds


def test_a_run_past_its_bound_is_stopped_and_raises(tmp_path: Path) -> None:
    """A run that outlives its time bound is ended by pid and reported as a LoadError."""
    spec = LoadSpec(HTTP_KEEPALIVE, closed_port_url(), users=1, run_seconds=60)
    run = start_load(spec, workdir=tmp_path, timeout=2)
    with run, pytest.raises(LoadError, match="did not finish within 2s"):
        run.wait()
    assert not run.main.running()


def test_locust_exiting_badly_is_a_load_error_with_its_output(tmp_path: Path) -> None:
    spec = LoadSpec(HTTP_KEEPALIVE, "http://127.0.0.1:9", run_seconds=1, extra_args=("--no-such-option",))
    with pytest.raises(LoadError, match=r"exited with 2.*no-such-option"):
        run_load(spec, workdir=tmp_path)


def test_a_missing_locustfile_is_named_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"locustfile .*no_such\.py does not exist .*http_keepalive"):
        run_load(LoadSpec("no_such", "http://127.0.0.1:9"), workdir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_missing_locust_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "locust" else real(name, *a))
    with pytest.raises(LoadError, match="locust is not installed"):
        locust_command()


def test_locustfiles_are_found_by_stem_and_by_path() -> None:
    path = locustfile("http_keepalive")
    assert path.name == "http_keepalive.py" and path.parent.name == "locustfiles"
    assert locustfile(str(path)) == path == locustfile("http_keepalive.py")


def test_locust_never_enters_this_process(matrix: dict[tuple[str, str], Cell]) -> None:
    """Locust and gevent ran only in their own processes (gevent's patching breaks pytest)."""
    assert matrix
    assert "locust" not in sys.modules and "gevent" not in sys.modules


def test_worker_manifest_runs_in_the_lab_as_the_environment_s_locust() -> None:
    """The worker Deployment is configured by environment alone, finds the locustfiles where their
    ConfigMap is mounted, and maps to this venv's locust on the imitated nodes."""
    from lbconform.kube.manifests import load_one
    from lbconform_lab.agent import images

    dep = load_one("locust-worker")
    assert dep["metadata"]["labels"]["app.kubernetes.io/part-of"] == "lbconform"
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LOCUST_LOCUSTFILE"] == locustfiles.mounted(HTTP_KEEPALIVE)
    # The workers run the master's Locust: the version this environment pins (and the lab's image).
    assert container["image"] == f"locustio/locust:{importlib.metadata.version('locust')}"
    (mount,) = container["volumeMounts"]
    (volume,) = pod["spec"]["volumes"]
    assert (mount["mountPath"], mount["name"]) == (locustfiles.MOUNT_PATH, volume["name"])
    assert volume["configMap"]["name"] == locustfiles.config_map()["metadata"]["name"]
    assert {"LOCUST_MASTER_NODE_HOST", "LOCUST_MASTER_NODE_PORT"} <= env.keys()
    assert not any("$(" in a for a in container["args"]), "the lab does not expand $(VAR)"
    program = images.resolve(container["image"], container.get("command") or [], container["args"])
    assert Path(program.argv[0]) == Path(sys.executable).with_name("locust")
    assert program.argv[1:] == ["--worker"]


@pytest.mark.parametrize(("text", "kind"), [
    ("reset: ConnectionResetError(104, 'Connection reset by peer')", RESET),
    ("wrong-answer: HTTP 500", WRONG),
    ("CatchResponseError('timeout: read timed out')", TIMEOUT),
    ("ConnectionRefusedError(111, 'Connection refused')", "other"),
    ("resetting: no such kind", "other"),
])
def test_failure_texts_name_their_kind(text: str, kind: str) -> None:
    assert kind_of_error(text) == kind


def test_the_locustfiles_config_map_carries_the_whole_folder_and_names_where_each_is_mounted() -> None:
    data = locustfiles.config_map()["data"]
    assert isinstance(data, dict)
    folder = {p.name for p in locustfiles_dir().glob("*.py")}
    assert set(data) == folder >= {"lbconform_locust.py", "shapes.py"}
    assert data["shapes.py"] == (locustfiles_dir() / "shapes.py").read_text()
    assert locustfiles.mounted("http_keepalive") == f"{locustfiles.MOUNT_PATH}/http_keepalive.py"
    with pytest.raises(LoadError, match="worker pods run only the locustfiles of locustfiles/"):
        locustfiles.mounted(__file__)
