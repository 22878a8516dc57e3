"""The quiet backend: an HTTP/1.1 server that never sends a packet on an idle connection.

Every Go server (agnhost netexec among them) turns TCP keepalive on for each connection it
accepts, probing after 15 s of idle: those probes keep a load balancer's idle entry fresh, so
an idle timeout longer than 15 s can never expire behind it. This program answers what the idle
suites ask of agnhost, with keepalive off on every accepted socket and no idle limit of its own,
so that a connection's idle time is the client's alone. It runs on the Python standard library
only, from the public ``python`` image, mounted from a ConfigMap
(manifests/backend-quiet-deployment.yaml).

Paths: /hostname (the pod's name), /clientip (the source address and port it saw), /echo?msg=X,
/delay?seconds=N (answers after N seconds, no shell), /healthz, and /readyz (503 once SIGTERM
arrived: the server keeps serving ``--delay-shutdown`` seconds, then exits, as agnhost does).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from urllib.parse import parse_qs, urlsplit

#: The longest /delay answers (a request asking more is refused with 400).
MAX_DELAY_SECONDS = 600.0

terminating = threading.Event()


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        sock, address = super().get_request()
        # Off explicitly: nothing may probe an idle connection from this side.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 0)
        return sock, address


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: No idle limit: a connection stays open until the client (or the network) ends it.
    timeout = None

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/hostname":
            self.answer(200, socket.gethostname())
        elif url.path == "/clientip":
            host, port = self.client_address[:2]
            self.answer(200, f"{host}:{port}")
        elif url.path == "/echo":
            self.answer(200, query.get("msg", [""])[0])
        elif url.path == "/delay":
            self.delay(query.get("seconds", ["0"])[0])
        elif url.path == "/healthz":
            self.answer(200, "ok")
        elif url.path == "/readyz" and terminating.is_set():
            self.answer(503, "terminating")
        elif url.path == "/readyz":
            self.answer(200, "ok")
        else:
            self.answer(404, f"no such path: {url.path}")

    def delay(self, text: str) -> None:
        try:
            seconds = float(text)
        except ValueError:
            self.answer(400, f"seconds must be a number, got {text!r}")
            return
        if not 0 <= seconds <= MAX_DELAY_SECONDS:
            self.answer(400, f"seconds must be within 0..{MAX_DELAY_SECONDS:g}")
            return
        time.sleep(seconds)
        self.answer(200, socket.gethostname())

    def answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per request would fill the container log of a load test."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, default=8080)
    parser.add_argument("--address", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--delay-shutdown", type=float, default=0.0,
                        help="seconds to keep serving after SIGTERM (with /readyz at 503)")
    args = parser.parse_args(argv)
    server = QuietServer((args.address, args.http_port), Handler)

    def on_term(signum: int, frame: FrameType | None) -> None:
        terminating.set()
        threading.Timer(args.delay_shutdown, server.shutdown).start()

    signal.signal(signal.SIGTERM, on_term)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
