"""The traffic recorder: an open-loop request loop at one address for a bounded time, as a process.

``python -m lbconform.chaos.traffic.recorder --address A --port P --rate R --seconds S --out F``
runs lbconform's RequestLoop (inside ``--netns`` when given: the lab's client namespace)
and writes one JSON document to F when it ends: requests sent, failures by kind, resets,
every failure with its wall-clock time, and the per-second outcomes as a timeline (to which a
suite adds the experiment's events before plotting it). F is written whole (a temporary file renamed),
so a reader never sees half of it; a recorder that cannot run writes ``error`` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lbconform.traffic.requests import KEEP_ALIVE, NEW_CONNECTION, OK, RESET, LoopResult, RequestLoop
from lbconform.traffic.timeline import Timeline

#: More failures than this are counted but not listed one by one.
MAX_LISTED_FAILURES = 20000


def summarize(result: LoopResult, meta: dict[str, Any], timeline: Timeline | None = None) -> dict[str, Any]:
    """The JSON document of one run."""
    return {
        "timeline": timeline.to_json() if timeline is not None else None,
        **meta,
        "started": result.started,
        "ended": result.ended,
        "requests": result.sent,
        "ok": result.outcomes[OK],
        "failed": result.failed,
        "resets": result.outcomes[RESET],
        "outcomes": result.failure_kinds(),
        "backends": dict(result.backends),
        "backend_changes": [[at, backend] for at, backend in result.changes],
        "failures": [{"at": f.at, "kind": f.kind, "detail": f.detail}
                     for f in result.failures[:MAX_LISTED_FAILURES]],
        "error": "",
    }


def record(address: str, port: int, rate: float, seconds: float, *, netns: str | None = None,
           variant: str = NEW_CONNECTION, timeout: float = 3.0, path: str = "/hostname") -> dict[str, Any]:
    """Run the loop to its end and return its document."""
    meta = {"address": address, "port": port, "netns": netns or "", "rate": rate, "seconds": seconds,
            "variant": variant, "path": path}
    timeline = Timeline(time.time())
    loop = RequestLoop(address, port, netns, path=path, variant=variant, timeout=timeout,
                       on_outcome=timeline.outcome)
    return summarize(loop.run(rate, seconds), meta, timeline)


def write_atomically(out: Path, doc: dict[str, Any]) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lbconform.chaos.traffic.recorder", description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result goes")
    parser.add_argument("--netns", default="", help="network namespace to send from (the lab's client)")
    parser.add_argument("--variant", default=NEW_CONNECTION, choices=(NEW_CONNECTION, KEEP_ALIVE))
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per request")
    parser.add_argument("--path", default="/hostname")
    args = parser.parse_args(argv)
    try:
        doc = record(args.address, args.port, args.rate, args.seconds, netns=args.netns or None,
                     variant=args.variant, timeout=args.timeout, path=args.path)
    except Exception as exc:
        write_atomically(args.out, {"error": f"{type(exc).__name__}: {exc}", "ended": time.time()})
        print(f"recorder: {exc}", file=sys.stderr)
        return 1
    write_atomically(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
