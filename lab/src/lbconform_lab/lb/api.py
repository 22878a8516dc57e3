"""The reference LB's state API, as a cloud API serves a load balancer's state.

``GET /services`` all Services; ``GET /services/NS/NAME`` one (VIP, mode, pool, healthy set
with the time each backend last changed state, parameters, counters); ``GET /defects`` and
``PUT /defects`` (``{"defects": [...]}``, lab-wide, or ``{"defects": [...], "run": ID}`` for the
Services of one harness run) read and switch the defects at runtime;
``GET /healthz`` (200 once the first reconcile pass is done). JSON in and out, inside the LB's namespace only.

It answers from the view a pass leaves as it ends (``view``), waiting a bounded time for the pass
in progress, and with the defects as last switched.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

from lbconform_lab.lb.controller import Controller
from lbconform_lab.lb.model import Json
from lbconform_lab.lb.params import DEFECTS

PORT = 9100


def defects(controller: Controller) -> Json:
    """The defects as last switched: lab-wide and per run."""
    lab_wide, per_run = controller.defects, controller.run_defects
    return {"defects": sorted(lab_wide), "runDefects": {run: sorted(d) for run, d in sorted(per_run.items())}}


def state(controller: Controller) -> Json:
    """The LB's state, as ``GET /services`` answers it: the last pass's view and the defects now."""
    view = controller.current_view()
    return {**defects(controller), "services": dict(view.services),
            "deletedButKept": dict(view.deleted_but_kept)}


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
                known = {d.name: {"does": d.does, "correct": d.correct} for d in DEFECTS.values()}
                self._send(200, {**defects(controller), "known": known})
            elif parts == ["services"]:
                self._send(200, state(controller))
            elif len(parts) == 3 and parts[0] == "services":
                svc = controller.current_view().services.get(f"{parts[1]}/{parts[2]}")
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
