"""Running one experiment from Python: ``chaos run`` in a subprocess, bounded, journal parsed.

A subprocess because the kubernetes client reads ``$KUBECONFIG`` when it is imported, so
each run gets the target's kubeconfig in its environment before anything loads it; and
because chaostoolkit configures logging and exits as a CLI does. Rollbacks are always
played (``--rollback-strategy always``): with chaostoolkit's default a failed probe after
the method would leave a killed node dead. Variables go in typed (``--var k:int=3``), so
the experiment's arguments see numbers and lists, not strings.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from lbconform.errors import LbconformError
from lbconform.resources import experiments_dir

log = logging.getLogger(__name__)

#: Bound of one experiment run unless the caller states its own: the longest experiment's
#: traffic window plus a node restart, with room.
DEFAULT_TIMEOUT_SECONDS: Final = 600.0
#: After the bound, the chaos process gets SIGTERM (it plays rollbacks on it) and this long.
ROLLBACK_GRACE_SECONDS: Final = 120.0


class ExperimentError(LbconformError):
    """An experiment could not be run or did not finish in time."""


@dataclass
class ExperimentRun:
    """What one ``chaos run`` ended with."""

    experiment: str
    status: str
    deviated: bool
    returncode: int
    journal: dict[str, Any]
    journal_path: Path
    log_path: Path
    #: Probe name -> output, from the hypothesis after the method (else before it).
    hypothesis: dict[str, Any] = field(default_factory=dict)
    #: Activity name -> output, of the method's activities, in order.
    method: dict[str, Any] = field(default_factory=dict)
    #: Names of method and rollback activities that failed.
    failed_activities: list[str] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """The experiment ran to its end, its hypothesis held, and each of its activities did what
        it should: chaostoolkit completes an experiment whose action failed (a restart that never
        happened), and a hypothesis that held without the disruption proves nothing."""
        return self.status == "completed" and not self.deviated and not self.failed_activities


def experiment_path(name: str) -> Path:
    """``experiments/NAME.json`` (``name`` with or without ``.json``), or a path to a file."""
    given = Path(name)
    if given.suffix == ".json" and given.is_file():
        return given
    path = experiments_dir() / f"{given.stem if given.suffix == '.json' else name}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in experiments_dir().glob("*.json")))
        raise ExperimentError(f"no experiment {name!r}: lbconform has {known}")
    return path


def var_arg(name: str, value: object) -> str:
    """One ``--var`` value, typed so the experiment's arguments get the value's type."""
    if isinstance(value, bool):
        return f"{name}:bool={'true' if value else 'false'}"
    if isinstance(value, int):
        return f"{name}:int={value}"
    if isinstance(value, float):
        return f"{name}:float={value!r}"
    if isinstance(value, list | tuple | dict):
        return f"{name}:json={json.dumps(value)}"
    return f"{name}={value}"


def chaos_command(path: Path, journal: Path, log_file: Path, variables: Mapping[str, object]) -> list[str]:
    argv = [sys.executable, "-m", "chaostoolkit", "--no-version-check", "--log-file", str(log_file),
            "--settings", str(journal.with_name("settings.yaml")),
            "run", "--journal-path", str(journal), "--rollback-strategy", "always"]
    for name, value in variables.items():
        argv += ["--var", var_arg(name, value)]
    return [*argv, str(path)]


def parse_journal(name: str, journal: dict[str, Any], returncode: int, journal_path: Path,
                  log_path: Path) -> ExperimentRun:
    states = journal.get("steady_states") or {}
    state = states.get("after") or states.get("before") or {}
    hypothesis = {p["activity"]["name"]: p.get("output") for p in state.get("probes", [])}
    method = {r["activity"]["name"]: r.get("output") for r in journal.get("run", [])}
    failed = [r["activity"]["name"] for r in [*journal.get("run", []), *journal.get("rollbacks", [])]
              if r.get("status") == "failed"]
    return ExperimentRun(name, str(journal.get("status", "")), bool(journal.get("deviated")), returncode,
                         journal, journal_path, log_path, hypothesis, method, failed)


def run_experiment(name: str, *, kubeconfig: str | Path | None = None,
                   variables: Mapping[str, object] | None = None,
                   timeout: float = DEFAULT_TIMEOUT_SECONDS, workdir: Path | None = None,
                   env: Mapping[str, str] | None = None) -> ExperimentRun:
    """Run experiment ``name`` (``experiments/NAME.json`` or a path) with ``chaos run``.

    ``kubeconfig`` becomes the subprocess's ``$KUBECONFIG``; ``variables`` override the
    experiment's configuration (chaostoolkit drops a variable the configuration does not
    declare, so that is an error here). The traffic's results land in ``workdir``. Returns
    the parsed journal; raises ExperimentError when the run does not end within ``timeout``
    seconds or leaves no journal.
    """
    # chaos runs in ``work``: every path it is given is absolute, whatever the caller's directory.
    path = experiment_path(name).resolve()
    declared = json.loads(path.read_text()).get("configuration", {})
    unknown = sorted(set(variables or {}) - set(declared))
    if unknown:
        raise ExperimentError(f"experiment {path.stem} has no configuration {unknown[0]!r}: "
                              f"it has {', '.join(sorted(declared))}")
    work = (workdir or Path(tempfile.mkdtemp(prefix=f"lbconform-chaos-{path.stem}-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    variables = dict(variables or {})
    if "lbconform_state_dir" in declared:
        variables.setdefault("lbconform_state_dir", str(work))
    journal_path, log_path = work / "journal.json", work / "chaostoolkit.log"
    child_env = dict(os.environ if env is None else env)
    if kubeconfig is not None:
        child_env["KUBECONFIG"] = str(Path(kubeconfig).expanduser().resolve())
    argv = chaos_command(path, journal_path, log_path, variables)
    log.info("running experiment %s: %s", path.stem, " ".join(argv))
    with open(work / "chaos.out", "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=work, env=child_env)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=ROLLBACK_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise ExperimentError(f"experiment {path.stem} did not finish within {timeout:g}s; "
                                  f"output in {work}") from None
    try:
        journal = json.loads(journal_path.read_text())
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"experiment {path.stem} exited with {returncode} and left no journal "
                              f"({exc}); output in {work / 'chaos.out'}") from None
    return parse_journal(path.stem, journal, returncode, journal_path, log_path)
