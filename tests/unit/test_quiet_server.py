"""The quiet backend (manifests/quiet-server.py) answers what the suites ask of agnhost, on one
kept-alive connection, and never probes an idle connection: ``ss`` shows a keepalive timer on
a socket that has one (the control) and none on the server's side of the connection."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from lbconform.resources import data_dir
from lbconform.wait import poll_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(data_dir("manifests") / "quiet-server.py"),
                             "--address=127.0.0.1", f"--http-port={port}", "--delay-shutdown=1"])

    def answers() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        poll_until(answers, timeout=10, interval=0.05, description="the quiet server to listen")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, str]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode()


def _timers(port_filter: str) -> str:
    return subprocess.run(["ss", "-tnoH", "state", "established", port_filter], check=True,
                          capture_output=True, text=True).stdout


def test_it_answers_agnhosts_paths_on_one_connection(server: tuple[subprocess.Popen[bytes], int]) -> None:
    _, port = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.connect()
    assert conn.sock is not None
    local_port = conn.sock.getsockname()[1]
    assert _get(conn, "/hostname") == (200, socket.gethostname())
    assert _get(conn, "/clientip") == (200, f"127.0.0.1:{local_port}")
    assert _get(conn, "/echo?msg=hello") == (200, "hello")
    started = time.monotonic()
    assert _get(conn, "/delay?seconds=0.3") == (200, socket.gethostname())
    assert time.monotonic() - started >= 0.3
    assert _get(conn, "/delay?seconds=soon")[0] == 400
    assert _get(conn, "/delay?seconds=601")[0] == 400
    assert _get(conn, "/readyz") == (200, "ok")
    assert _get(conn, "/nowhere")[0] == 404
    # Every answer came on the connection opened first.
    assert conn.sock.getsockname()[1] == local_port
    conn.close()


def test_it_never_probes_an_idle_connection(server: tuple[subprocess.Popen[bytes], int]) -> None:
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=5) as probed:
        # The control: a socket with keepalive shows a keepalive timer in ss.
        probed.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        probed.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 600)
        probed.sendall(b"GET /hostname HTTP/1.1\r\nHost: x\r\n\r\n")
        assert probed.recv(4096).startswith(b"HTTP/1.1 200")
        assert "keepalive" in _timers(f"dport = :{port}")
        server_side = _timers(f"sport = :{port}")
        assert server_side.strip() and "keepalive" not in server_side


def test_sigterm_makes_it_unready_then_it_exits(server: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    proc.send_signal(signal.SIGTERM)
    poll_until(lambda: _get(conn, "/readyz") == (503, "terminating"), timeout=5, interval=0.05,
               description="/readyz to answer 503")
    assert _get(conn, "/hostname") == (200, socket.gethostname())
    assert proc.wait(timeout=10) == 0
