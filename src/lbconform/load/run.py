"""Running a load: one headless Locust process, or a master with its workers, bounded in time.

``run_load`` blocks until the run is over and returns its ``LoadResult``; ``start_load``
returns the ``LoadRun`` so that the caller can do its chaos meanwhile and then ``wait`` (or
``stop`` early, which still yields the statistics: Locust writes them on SIGTERM). A run
that outlives its time bound is stopped and raises a LoadError: the bound is the load's
duration plus ``START_STOP_SLACK_SECONDS`` (plus the wait for workers when distributed),
since a load that does not end is a harness fault, not a measurement.

Every file a run writes lands in its work directory: ``locust.json`` (totals),
``locust_*.csv`` (Locust's CSVs: stats, per-second history, failures, exceptions),
``locust-failures.json`` (every failure text, written by the master as it quits),
``phases.jsonl`` (the load shape's phases), and one log per process.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path
from types import TracebackType

from lbconform.errors import LoadError
from lbconform.load.process import LocustProcess
from lbconform.load.result import LoadResult, Phase, read_phases, read_result
from lbconform.load.spec import Distributed, LoadSpec
from lbconform.wait import poll_until

log = logging.getLogger(__name__)

#: Beyond the load's own duration: Locust's start (about a second), a shape's last tick,
#: the master telling its workers to stop and their last reports, writing the statistics.
START_STOP_SLACK_SECONDS = 30.0
#: A worker quits within a second of its master's quit message; past this it is stopped.
WORKER_EXIT_SECONDS = 5.0

PREFIX = "locust"

__all__ = ["START_STOP_SLACK_SECONDS", "WORKER_EXIT_SECONDS", "LoadRun", "run_load", "start_load"]


class LoadRun:
    """A load run in progress: its processes, its work directory, and its time bound."""

    def __init__(self, spec: LoadSpec, *, workdir: Path, netns: str | None = None,
                 distributed: Distributed | None = None, timeout: float | None = None) -> None:
        self.spec = spec
        self.workdir = workdir
        self.netns = netns
        self.distributed = distributed
        files = ",".join(str(p) for p in spec.locustfiles())
        worker_files = str(spec.locustfiles()[0])
        wait = float(distributed.worker_wait_seconds) if distributed else 0.0
        self.timeout = timeout if timeout is not None else spec.duration + wait + START_STOP_SLACK_SECONDS
        workdir.mkdir(parents=True, exist_ok=True)
        self.prefix = workdir / PREFIX
        self.phases_file = workdir / "phases.jsonl"
        # A reused work directory must not lend this run an earlier run's numbers.
        for stale in (self.phases_file, workdir / f"{PREFIX}.json", workdir / f"{PREFIX}-failures.json",
                      *workdir.glob(f"{PREFIX}_*.csv")):
            stale.unlink(missing_ok=True)
        env = {
            **spec.environment(),
            "LBCONFORM_FAILURES_FILE": str(workdir / f"{PREFIX}-failures.json"),
            "LBCONFORM_PHASES_FILE": str(self.phases_file),
        }
        args = ["-f", files, "--host", spec.host, "--headless", "--only-summary",
                "--json-file", str(self.prefix), "--csv", str(self.prefix),
                "--stop-timeout", str(spec.stop_timeout),
                # Failed requests are the measurement, not an error: only a broken run exits non-zero.
                "--exit-code-on-error", "0",
                *spec.load_options(), *spec.extra_args]
        if distributed is not None:
            args += ["--master", "--expect-workers", str(distributed.expect_workers),
                     "--expect-workers-max-wait", str(distributed.worker_wait_seconds),
                     "--master-bind-host", distributed.bind_host,
                     "--master-bind-port", str(distributed.bind_port)]
        self.started = time.monotonic()
        self.main = LocustProcess("locust master" if distributed else "locust", args,
                                  log_path=workdir / f"{PREFIX}.log", netns=netns, env=env, cwd=workdir)
        self.workers: list[LocustProcess] = []
        try:
            for i in range(distributed.local_workers if distributed else 0):
                assert distributed is not None
                self.workers.append(LocustProcess(
                    f"locust worker {i + 1}",
                    ["-f", worker_files, "--worker", "--master-host", distributed.worker_master_host,
                     "--master-port", str(distributed.bind_port)],
                    log_path=workdir / f"worker-{i + 1}.log", netns=netns, env=env, cwd=workdir))
        except LoadError:
            self._stop_all()
            raise

    # --- public ------------------------------------------------------------------------
    @property
    def processes(self) -> list[LocustProcess]:
        return [self.main, *self.workers]

    def wait(self) -> LoadResult:
        """Wait for the run to end on its own, within its time bound, and read its result."""
        remaining = self.timeout - (time.monotonic() - self.started)
        code = self.main.wait(remaining)
        if code is None:
            self._stop_all()
            raise LoadError(f"{self.main.name} did not finish within {self.timeout:g}s and was stopped; "
                            f"log {self.main.log_path}: {self.main.tail()}")
        return self._finish(code)

    def phases(self) -> tuple[Phase, ...]:
        """The load shape's phases entered so far (none without a shape)."""
        return read_phases(self.phases_file)

    def wait_for_phase(self, name: str, timeout: float | None = None) -> Phase:
        """Block until the shape has entered phase ``name`` (``"chaos"``: start the chaos now).

        ``timeout`` defaults to the rest of the run's time bound.
        """
        if timeout is None:
            timeout = max(self.timeout - (time.monotonic() - self.started), 0.0)

        def entered() -> Phase | None:
            if not self.main.running() and self.main.returncode != 0:
                raise LoadError(f"{self.main.name} exited with {self.main.returncode} before phase {name}; "
                                f"log {self.main.log_path}: {self.main.tail()}")
            return next((p for p in self.phases() if p.name == name), None)

        return poll_until(entered, timeout=timeout, interval=0.1, retry_on=(),
                          description=f"the load shape to enter phase {name!r} ({self.phases_file})")

    def stop(self) -> LoadResult:
        """End the run now (Locust still writes its statistics) and read its result."""
        code = self.main.stop()
        return self._finish(code if code is not None else -9)

    def close(self) -> None:
        """Stop whatever still runs; a finished run is untouched."""
        self._stop_all()

    def __enter__(self) -> LoadRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- helpers -----------------------------------------------------------------------
    def _stop_all(self) -> None:
        for proc in self.processes:
            with contextlib.suppress(Exception):
                proc.stop()

    def _finish(self, code: int) -> LoadResult:
        # The master tells its workers to quit as it ends; give them the grace to do so.
        for worker in self.workers:
            worker_code = worker.wait(WORKER_EXIT_SECONDS)
            if worker_code is None:
                log.warning("%s (pid %d) outlived its master", worker.name, worker.pid)
                worker.stop()
            elif worker_code != 0:
                log.warning("%s exited with %d; log %s: %s", worker.name, worker_code, worker.log_path,
                            worker.tail())
        if code != 0:
            raise LoadError(f"{self.main.name} exited with {code}; log {self.main.log_path}: "
                            f"{self.main.tail()}")
        result = read_result(self.prefix, self.phases_file)
        if result.exceptions:
            raise LoadError(f"Locust users raised exceptions (a locustfile bug, not a failed request): "
                            f"{result.exceptions[0]}; log {self.main.log_path}")
        log.info("load %s: %d requests, %d failures %s, %.1f/s over %.1fs", self.spec.locustfile,
                 result.requests, result.failures,
                 {k: v for k, v in result.failures_by_kind.items() if v}, result.requests_per_second,
                 result.duration)
        return result


def start_load(spec: LoadSpec, *, workdir: Path | None = None, netns: str | None = None,
               distributed: Distributed | None = None, timeout: float | None = None) -> LoadRun:
    """Start the run's processes and return at once; the caller must ``wait``, ``stop`` or ``close``.

    ``workdir`` defaults to a new temporary directory; ``netns`` is a network namespace
    (as ``ip netns`` names it) that every local process runs in.
    """
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="lbconform-load-"))
    return LoadRun(spec, workdir=workdir, netns=netns, distributed=distributed, timeout=timeout)


def run_load(spec: LoadSpec, *, workdir: Path | None = None, netns: str | None = None,
             distributed: Distributed | None = None, timeout: float | None = None) -> LoadResult:
    """Run the load to its end and return what it counted."""
    with start_load(spec, workdir=workdir, netns=netns, distributed=distributed, timeout=timeout) as run:
        return run.wait()
