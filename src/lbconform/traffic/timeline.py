"""What happened, second by second: the outcome of every request or connection, binned by the
second it ended in, next to what the test did meanwhile (a rollout started, a pod was deleted,
a node was killed, a health check flipped).

A chaos suite's verdict is a number ("12 resets"); the timeline is what lets a reader see
*when* they happened relative to what the test did, as JSON beside the report and as a PNG.
Outcomes arrive from asyncio loops and threads at thousands per second, so they are counted
into per-second bins under a lock, not kept one by one. Times are epoch seconds (what
``time.time()`` and the request loop's ``on_outcome`` give). matplotlib is imported only
when a plot is drawn, so importing this module costs nothing.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["OK", "Event", "Timeline"]

OK = "ok"

#: Failure kinds get fixed colours so two plots compare at a glance; unknown kinds take the
#: spare ones in turn. All differ from each other and from ok's green.
KIND_COLOURS = {
    "reset": "#d62728",         # red
    "refused": "#ff7f0e",       # orange
    "timeout": "#9467bd",       # purple
    "closed": "#8c564b",        # brown
    "wrong-answer": "#e377c2",  # pink
}
SPARE_COLOURS = ("#17becf", "#bcbd22", "#7f7f7f", "#1f77b4", "#000080", "#808000")
OK_COLOUR = "#2ca02c"


@dataclass(frozen=True)
class Event:
    """Something the test did, at an epoch time."""

    at: float
    name: str
    detail: str = ""


class Timeline:
    """Outcomes per second since ``start`` (epoch seconds), and the events between them.

    ``outcome`` and ``event`` may be called from any thread; ``at`` defaults to now.
    ``outcome`` has the request loop's ``on_outcome`` signature, so it can be passed as is.
    """

    def __init__(self, start: float, *, clock: Callable[[], float] = time.time) -> None:
        self.start = start
        self._clock = clock
        self._lock = threading.Lock()
        self._bins: dict[int, Counter[str]] = {}
        self._events: list[Event] = []

    # --- recording -----------------------------------------------------------------------
    def event(self, name: str, detail: str = "", at: float | None = None) -> Event:
        recorded = Event(self._clock() if at is None else at, name, detail)
        with self._lock:
            self._events.append(recorded)
        return recorded

    def outcome(self, kind: str, at: float | None = None) -> None:
        second = self.second_of(self._clock() if at is None else at)
        with self._lock:
            counts = self._bins.get(second)
            if counts is None:
                counts = self._bins[second] = Counter()
            counts[kind] += 1

    def second_of(self, at: float) -> int:
        """The bin ``at`` falls in: second 0 is [start, start + 1). Before start is negative."""
        return math.floor(at - self.start)

    # --- reading -------------------------------------------------------------------------
    @property
    def events(self) -> list[Event]:
        with self._lock:
            return sorted(self._events, key=lambda e: e.at)

    def kinds(self) -> list[str]:
        """Every outcome kind recorded: ok first, then the failures by name."""
        with self._lock:
            seen = {kind for counts in self._bins.values() for kind in counts}
        return sorted(seen, key=lambda kind: (kind != OK, kind))

    def totals(self) -> dict[str, int]:
        with self._lock:
            total: Counter[str] = Counter()
            for counts in self._bins.values():
                total.update(counts)
        return dict(total)

    def per_second(self) -> list[dict[str, int]]:
        """One row per second from the first to the last one that saw an outcome or an event,
        quiet seconds included (an outage where requests hang shows as zeros, not as a gap):
        ``{"second": n, kind: count, ...}`` with every kind present in every row."""
        kinds = self.kinds()
        with self._lock:
            bins = {second: Counter(counts) for second, counts in self._bins.items()}
            seconds = set(bins) | {self.second_of(e.at) for e in self._events}
        if not seconds:
            return []
        rows = []
        for second in range(min(0, *seconds), max(seconds) + 1):
            counts = bins.get(second, Counter())
            rows.append({"second": second, **{kind: counts[kind] for kind in kinds}})
        return rows

    # --- saving --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "kinds": self.kinds(),
            "totals": self.totals(),
            "events": [{"at": e.at, "offset": round(e.at - self.start, 6), "name": e.name,
                        "detail": e.detail} for e in self.events],
            "per_second": self.per_second(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timeline:
        timeline = cls(float(data["start"]))
        for e in data["events"]:
            timeline.event(e["name"], e.get("detail", ""), at=float(e["at"]))
        for row in data["per_second"]:
            counts = Counter({k: int(v) for k, v in row.items() if k != "second" and v})
            if counts:
                timeline._bins[int(row["second"])] = counts
        return timeline

    def save_json(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load_json(cls, path: str | Path) -> Timeline:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    # --- plotting ------------------------------------------------------------------------
    def plot(self, path: str | Path, title: str) -> Path:
        """Write a PNG: requests ok per second on top, failures per kind stacked below (own
        scale, as a handful of failures would vanish beside thousands of successes), and each
        event as a labelled vertical line across both."""
        # The figure is drawn on an Agg canvas of its own: no pyplot, so no global backend,
        # no display, and nothing shared with another thread's plot.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        rows = self.per_second()
        failures = [k for k in self.kinds() if k != OK]
        seconds = [row["second"] for row in rows]
        fig = Figure(figsize=(12, 6), layout="constrained")
        FigureCanvasAgg(fig)
        ok_ax, fail_ax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        fig.suptitle(title)

        ok_ax.plot([s + 0.5 for s in seconds], [row.get(OK, 0) for row in rows],
                   color=OK_COLOUR, marker=".", label="ok")
        ok_ax.set_ylabel("ok per second")
        ok_ax.set_ylim(bottom=0)
        bottom = [0] * len(rows)
        spare = iter(SPARE_COLOURS * (1 + len(failures) // len(SPARE_COLOURS)))
        for kind in failures:
            counts = [row[kind] for row in rows]
            fail_ax.bar(seconds, counts, width=1.0, align="edge", bottom=bottom, label=kind,
                        color=KIND_COLOURS.get(kind) or next(spare), edgecolor="white", linewidth=0.3)
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        fail_ax.set_ylabel("failures per second")
        fail_ax.set_xlabel(f"seconds since {time.strftime('%H:%M:%S', time.localtime(self.start))}")
        fail_ax.set_ylim(bottom=0, top=max([*bottom, 1]) * 1.15)
        if not failures:
            fail_ax.text(0.5, 0.5, "no failures", transform=fail_ax.transAxes, ha="center",
                         va="center", color="grey")

        for e in self.events:
            offset = e.at - self.start
            for ax in (ok_ax, fail_ax):
                ax.axvline(offset, color="black", linestyle="--", linewidth=0.8)
            ok_ax.annotate(e.name, xy=(offset, 1.0), xycoords=("data", "axes fraction"),
                           xytext=(2, -2), textcoords="offset points", rotation=90,
                           ha="left", va="top", fontsize=8,
                           bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ok_ax.legend(loc="lower left")
        if failures:
            fail_ax.legend(loc="upper left", ncols=min(len(failures), 5))
        if seconds:
            fail_ax.set_xlim(seconds[0], seconds[-1] + 1)
        out = Path(path)
        fig.savefig(out, format="png", dpi=100)
        return out
