"""The reference LB's state API, as a cloud API serves a load balancer's state.

``GET /services`` all Services; ``GET /services/NS/NAME`` one (VIP, mode, pool, healthy set
with the time each backend last changed state, parameters, counters); ``GET /defects`` and
``PUT /defects`` (``{"defects": [...]}``, lab-wide, or ``{"defects": [...], "run": ID}`` for the
Services of one harness run) read and switch the defects at runtime;
``GET /healthz`` (200 once the first reconcile pass is done). JSON in and out, inside the LB's namespace only.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

from lbconform_lab.lb.controller import Controller
from lbconform_lab.lb.model import Json
from lbconform_lab.lb.params import DEFECTS
from lbconform_lab.lb.service import ServiceState

PORT = 9100


def describe(st: ServiceState) -> Json:
    """One Service's state, as ``GET /services/NS/NAME`` answers it."""
    backends = []
    for k, b in sorted(st.pool.items()):
        h = st.health(k)
        backends.append({
            "name": k, "address": b.ip, "ports": [{"protocol": p[0][0], "port": p[0][1], "target": p[1]}
                                                  for p in b.ports],
            "healthy": k in st.healthy,
            "lastChange": st.health_changed.get(k),
            "healthCheck": None if b.health is None else {
                "target": f"{b.health.protocol}://{b.health.ip}:{b.health.port}{b.health.path}",
                "passing": h.healthy if h else None, "lastResult": h.last_result if h else None,
                "checks": h.checks if h else 0},
        })
    return {"service": st.key, "uid": st.uid, "vip": st.vip, "mode": st.params.mode,
            "parameters": st.params.as_dict(), "pool": backends, "healthy": st.healthy,
            "counters": dict(st.counters), "defects": sorted(st.defects)}


def state(controller: Controller) -> Json:
    """The LB's state, as ``GET /services`` answers it."""
    with controller.lock:
        return {"defects": sorted(controller.defects),
                "runDefects": {run: sorted(d) for run, d in sorted(controller.run_defects.items())},
                "services": {k: describe(s) for k, s in sorted(controller.services.items())},
                "deletedButKept": {k: s.vip for k, s in sorted(controller.ghosts.items())}}


def serve(controller: Controller, host: str = "0.0.0.0", port: int = PORT) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body, indent=1, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if parts == ["healthz"]:  # ready once the first pass has rendered the rules
                ready = controller.ready.is_set()
                self._send(200 if ready else 503, {"ok": ready})
            elif parts == ["defects"]:
                doc = state(controller)
                self._send(200, {"defects": doc["defects"], "runDefects": doc["runDefects"],
                                 "known": {d.name: {"does": d.does, "correct": d.correct}
                                           for d in DEFECTS.values()}})
            elif parts == ["services"]:
                self._send(200, state(controller))
            elif len(parts) == 3 and parts[0] == "services":
                # One Service, described alone: the tests poll it ten times a second each, and
                # describing every Service for each poll starved the LB under the lab tests' load.
                with controller.lock:
                    st = controller.services.get(f"{parts[1]}/{parts[2]}")
                    svc = describe(st) if st is not None else None
                if svc:
                    self._send(200, svc)
                else:
                    self._send(404, {"error": "no load balancer for that Service"})
            else:
                self._send(404, {"error": "unknown path"})

        def do_PUT(self) -> None:
            if self.path.rstrip("/") != "/defects":
                self._send(404, {"error": "unknown path"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                run = body.get("run")
                controller.set_defects(set(body.get("defects") or []), str(run) if run else None)
            except (ValueError, AttributeError) as exc:
                self._send(400, {"error": str(exc)})
                return
            self._send(200, {"defects": sorted(controller.defects if not run else
                                               controller.run_defects.get(str(run), ()))})

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="state-api", daemon=True).start()
    return server
