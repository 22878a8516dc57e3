"""The timeline: binning by second, many threads at once, a JSON round trip, and a real PNG."""

from __future__ import annotations

import json
import struct
import sys
import threading
from pathlib import Path

from lbconform.traffic.timeline import KIND_COLOURS, OK, OK_COLOUR, SPARE_COLOURS, Event, Timeline

START = 1_700_000_000.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sample() -> Timeline:
    t = Timeline(START)
    for offset in (0.0, 0.2, 0.999, 1.0, 1.5, 4.2):
        t.outcome(OK, at=START + offset)
    t.outcome("reset", at=START + 1.1)
    t.outcome("reset", at=START + 1.9)
    t.outcome("timeout", at=START + 2.5)
    t.event("pod deleted", "web-7f9c", at=START + 1.05)
    t.event("rollout started", at=START + 0.5)
    return t


def test_outcomes_fall_in_the_second_they_ended_in_and_quiet_seconds_are_zeros() -> None:
    assert sample().per_second() == [
        {"second": 0, "ok": 3, "reset": 0, "timeout": 0},
        {"second": 1, "ok": 2, "reset": 2, "timeout": 0},
        {"second": 2, "ok": 0, "reset": 0, "timeout": 1},
        {"second": 3, "ok": 0, "reset": 0, "timeout": 0},
        {"second": 4, "ok": 1, "reset": 0, "timeout": 0},
    ]


def test_the_rows_reach_the_last_event_and_back_to_before_start() -> None:
    t = Timeline(START)
    t.outcome(OK, at=START - 0.5)
    t.event("node killed", at=START + 2.2)
    assert [row["second"] for row in t.per_second()] == [-1, 0, 1, 2]
    assert Timeline(START).per_second() == []


def test_at_defaults_to_the_clock_and_events_read_in_time_order() -> None:
    now = [START + 3.5]
    t = Timeline(START, clock=lambda: now[0])
    t.outcome("refused")
    t.event("health check flipped", "node-2 unhealthy")
    t.event("earlier", at=START)
    assert t.per_second()[3] == {"second": 3, "refused": 1}
    assert t.events == [Event(START, "earlier"),
                        Event(START + 3.5, "health check flipped", "node-2 unhealthy")]


def test_many_threads_record_while_another_reads() -> None:
    t = Timeline(START)
    writers, per_writer = 4, 5000
    done = threading.Event()
    errors: list[BaseException] = []

    def write(k: int) -> None:
        for i in range(per_writer):  # a new second each time: the bins grow under the reader
            t.outcome(OK if i % 3 else "reset", at=START + k * per_writer + i)
            if i % 50 == 0:
                t.event(f"step {k}.{i}", at=START + i)

    def read() -> None:
        while not done.is_set():
            try:
                t.to_json()
            except BaseException as exc:  # e.g. a dict that changed size while being read
                errors.append(exc)
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, to expose unguarded reads and writes
    try:
        reader = threading.Thread(target=read)
        reader.start()
        threads = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
        for w in threads:
            w.start()
        for w in threads:
            w.join()
        done.set()
        reader.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert sum(t.totals().values()) == writers * per_writer
    assert sum(row["ok"] + row["reset"] for row in t.per_second()) == writers * per_writer
    assert len(t.events) == writers * per_writer // 50


def test_json_round_trip_keeps_bins_and_events(tmp_path: Path) -> None:
    t = sample()
    path = t.save_json(tmp_path / "timeline.json")
    data = json.loads(path.read_text())
    assert data["totals"] == {"ok": 6, "reset": 2, "timeout": 1}
    assert data["events"][0] == {"at": START + 0.5, "offset": 0.5, "name": "rollout started", "detail": ""}
    again = Timeline.load_json(path)
    assert again.start == START
    assert again.per_second() == t.per_second()
    assert again.events == t.events
    assert again.to_json() == data


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _pixels_of(path: Path, colour: str) -> int:
    """How many pixels of the PNG are (nearly) ``colour``."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    image = imread(path)[:, :, :3]
    return int((abs(image - to_rgb(colour)).max(axis=2) < 0.02).sum())


def test_plot_draws_ok_and_each_failure_kind_in_its_colour(tmp_path: Path) -> None:
    t = sample()
    t.outcome("wrong-answer", at=START + 3.3)
    t.outcome("some-new-kind", at=START + 3.4)
    path = t.plot(tmp_path / "timeline.png", "rolling update, 3 replicas")
    assert _png_size(path) == (1200, 600)
    assert path.stat().st_size > 10_000
    for colour in (OK_COLOUR, KIND_COLOURS["reset"], KIND_COLOURS["timeout"], KIND_COLOURS["wrong-answer"],
                   SPARE_COLOURS[0]):
        assert _pixels_of(path, colour) > 100, colour
    assert _pixels_of(path, KIND_COLOURS["refused"]) == 0  # no refusals, nothing orange


def test_plot_of_an_empty_timeline_still_draws(tmp_path: Path) -> None:
    path = Timeline(START).plot(tmp_path / "empty.png", "nothing happened")
    assert _png_size(path) == (1200, 600)
    assert _pixels_of(path, KIND_COLOURS["reset"]) == 0
