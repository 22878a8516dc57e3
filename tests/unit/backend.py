"""A stand-in backend for unit tests of the traffic engines: an HTTP server on 127.0.0.1 that
answers every path with its name (as agnhost's /hostname answers with its pod's) and 500 under
/fail. The engines are real; only the backend is this small."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = "local-backend"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = NAME.encode()
        self.send_response(500 if self.path.startswith("/fail") else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving() -> Iterator[int]:
    """The server, running on a thread; its port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
