"""A report's evidence: the files a run writes beside its conformance report, and the check that
the report is what they make.

At the end of a run the collector writes, in ``evidence/`` beside ``conformance-report.yaml``:

- ``results.jsonl``: one JSON object a line per test, as the collector saw it: ``nodeid``,
  ``outcome``, ``message``, ``features``, ``description``, ``duration`` and ``measurements``
  (each as ``Measurement.to_json`` writes it; the test is the line's).
- ``run.json``: the run's parameters: the facts ``RunInfo`` holds (implementation, provider,
  mode, target kind, Kubernetes version, nodes, date, lbconform version, run id, profiles,
  declared values and their sources, timeouts), whether the run was interrupted, and the
  options it was given (``lbconform run``'s, by their ``dest``), but those that name the
  submitter's own cluster (``PRIVATE_OPTIONS``).
- ``declaration.yaml`` (or ``.json``): a copy of the ``--declaration`` file, where one was given;
  ``run.json``'s ``options.declaration`` then names the copy.

The report's ``evidence:`` section names each file by its path in that folder, with its SHA-256.

``check`` is ``report verify``'s: every digest must hold, and the report must be what
``conformance.build`` makes of the evidence (the same function that made it), field by field,
one line per difference (``compare``). A report without its evidence is *unverifiable*, never
valid.

The digests bind the files to the report and the re-derivation binds every outcome in the report
to the files: an edit of the report, or of a file, shows. They are no signature: whoever edits a
file, the report and the digest together makes a forgery that holds together, so a reviewer reads
``results.jsonl``, knowing that the report says exactly what it says.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from lbconform.report import compare, conformance, schema
from lbconform.report.model import OUTCOMES, Implementation, Measurement, RunInfo, TestResult, report_name

#: The report's section, and the folder of evidence a run writes beside its report.
SECTION: Final = compare.SECTION
EVIDENCE_DIR: Final = "evidence"
RESULTS_FILE: Final = "results.jsonl"
RUN_FILE: Final = "run.json"
#: The copy of the declaration file keeps the file's suffix (YAML or JSON).
DECLARATION_STEM: Final = "declaration"
RUN_KIND: Final = "RunParameters"
#: Options of a run the evidence leaves out: they name the submitter's own cluster and files.
PRIVATE_OPTIONS: Final = ("kubeconfig", "context")

_RESULT_KEYS: Final = ("nodeid", "outcome", "message", "features", "description", "duration", "measurements")


class EvidenceError(Exception):
    """An evidence file that is not what a run writes; its message is one line."""


@dataclass(frozen=True)
class Evidence:
    """What a report is built from, as its evidence files hold it."""

    results: tuple[TestResult, ...]
    measurements: tuple[Measurement, ...]
    run: RunInfo
    interrupted: bool
    #: The run's options by ``dest``; ``declaration`` is the copy's path in the evidence folder.
    options: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    """``check``'s answer: the differences (none when the report is its evidence's), or why the
    report cannot be checked at all (``unverifiable``, one line)."""

    problems: list[str]
    unverifiable: str | None = None


# --- writing ---------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def result_line(result: TestResult, measurements: Iterable[Measurement]) -> str:
    """One line of ``results.jsonl``: the test's result and its measurements."""
    return json.dumps({
        "nodeid": result.nodeid, "outcome": result.outcome, "message": result.message,
        "features": list(result.features), "description": result.description, "duration": result.duration,
        "measurements": [json.loads(m.to_json()) for m in measurements]})


def write(directory: Path, results: Sequence[TestResult], measurements: Iterable[Measurement], run: RunInfo,
          *, interrupted: bool = False, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the evidence of a report built by ``conformance.build(results, measurements, run,
    interrupted)`` into ``directory`` (an earlier run's there is replaced); the report's section.

    Each measurement belongs to the result whose name is its ``test`` (ValueError otherwise), as
    the collector's do. ``options`` are the run's, by ``dest``: a ``declaration`` is copied.
    """
    by_test: dict[str, list[Measurement]] = {r.name: [] for r in results}
    for m in measurements:
        if m.test not in by_test:
            raise ValueError(f"measurement {m.name!r} names test {m.test!r}, which has no result")
        by_test[m.test].append(m)
    for r in results:
        if r.name != report_name(r.nodeid):
            raise ValueError(f"result {r.nodeid!r} is named {r.name!r}, not {report_name(r.nodeid)!r}")
    opts = {k: v for k, v in (options or {}).items() if k not in PRIVATE_OPTIONS}
    _clear(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = [RESULTS_FILE, RUN_FILE]
    if opts.get("declaration"):
        source = Path(str(opts["declaration"])).expanduser()
        suffix = source.suffix.lower() if source.suffix.lower() in (".yaml", ".yml", ".json") else ".yaml"
        shutil.copyfile(source, directory / f"{DECLARATION_STEM}{suffix}")
        opts["declaration"] = f"{DECLARATION_STEM}{suffix}"
        names.append(opts["declaration"])
    lines = [result_line(r, by_test.pop(r.name, [])) for r in results]
    (directory / RESULTS_FILE).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    params = {"apiVersion": conformance.API_VERSION, "kind": RUN_KIND, "run": dataclasses.asdict(run),
              "interrupted": interrupted, "options": opts}
    (directory / RUN_FILE).write_text(json.dumps(params, indent=2) + "\n", encoding="utf-8")
    return {"files": [{"path": name, "sha256": sha256(directory / name)} for name in names]}


def _clear(directory: Path) -> None:
    """An earlier run's evidence files (only those: the folder may hold others' files)."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.is_file() and (path.name in (RESULTS_FILE, RUN_FILE) or path.stem == DECLARATION_STEM):
            path.unlink()


# --- reading ---------------------------------------------------------------------------------------


def locate(report: Path) -> Path | None:
    """The folder of evidence of the report in ``report``: ``X/`` beside ``X.yaml`` (a submitted
    report's), else ``evidence/`` beside it (a run's); None when neither is there."""
    for folder in (report.with_suffix(""), report.parent / EVIDENCE_DIR):
        if folder != report and folder.is_dir():
            return folder
    return None


def files_of(doc: Mapping[str, Any]) -> dict[str, str]:
    """The report's evidence files, path -> sha256 (empty when it names none)."""
    section = doc.get(SECTION)
    files = section.get("files") if isinstance(section, dict) else None
    return {str(f["path"]): str(f["sha256"]) for f in files or () if isinstance(f, dict)
            and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)}


def read(directory: Path) -> Evidence:
    """The evidence in ``directory``; EvidenceError (one line naming the file) when it is not a run's."""
    results: list[TestResult] = []
    measurements: list[Measurement] = []
    text = _text(directory / RESULTS_FILE)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            result, measured = _result(json.loads(line))
        except (ValueError, TypeError, KeyError) as exc:
            raise EvidenceError(f"{RESULTS_FILE}: line {number}: {exc}") from None
        results.append(result)
        measurements += measured
    try:
        params = json.loads(_text(directory / RUN_FILE))
        run, interrupted, options = _params(params)
    except (ValueError, TypeError, KeyError) as exc:
        raise EvidenceError(f"{RUN_FILE}: {exc}") from None
    return Evidence(tuple(results), tuple(measurements), run, interrupted, options)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"{path.name}: cannot read it ({exc})") from None


def _result(data: Any) -> tuple[TestResult, list[Measurement]]:
    if not isinstance(data, dict):
        raise ValueError(f"not a test's result: {schema.quote(data)}")
    unknown = sorted(set(data) - set(_RESULT_KEYS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    missing = [key for key in _RESULT_KEYS if key not in data]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    nodeid, outcome, message = data["nodeid"], data["outcome"], data["message"]
    features, description, duration = data["features"], data["description"], data["duration"]
    if not isinstance(nodeid, str) or not nodeid:
        raise ValueError(f"nodeid: {schema.quote(nodeid)} is not a test's nodeid")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome: {schema.quote(outcome)} is not one of {', '.join(OUTCOMES)}")
    if not isinstance(message, str) or not isinstance(description, str):
        raise ValueError("message and description must be strings")
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise ValueError(f"features: {schema.quote(features)} is not a list of names")
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not math.isfinite(duration):
        raise ValueError(f"duration: {schema.quote(duration)} is not a number of seconds")
    if not isinstance(data["measurements"], list):
        raise ValueError("measurements must be a list")
    name = report_name(nodeid)
    measured = [Measurement.from_json(json.dumps(m), test=name) for m in data["measurements"]]
    return TestResult(nodeid=nodeid, name=name, description=description, features=tuple(features),
                      outcome=outcome, duration=float(duration), message=message), measured


def _params(params: Any) -> tuple[RunInfo, bool, dict[str, Any]]:
    if not isinstance(params, dict) or params.get("kind") != RUN_KIND:
        raise ValueError(f"not a run's parameters (kind {RUN_KIND})")
    if params.get("apiVersion") != conformance.API_VERSION:
        raise ValueError(f"apiVersion {schema.quote(params.get('apiVersion'))}: this lbconform reads "
                         f"{conformance.API_VERSION}")
    facts, interrupted, options = params["run"], params["interrupted"], params["options"]
    if not isinstance(facts, dict) or not isinstance(options, dict) or not isinstance(interrupted, bool):
        raise ValueError("run and options must be mappings, interrupted true or false")
    known = {f.name for f in dataclasses.fields(RunInfo)}
    unknown = sorted(set(facts) - known)
    if unknown:
        raise ValueError(f"run: unknown field {unknown[0]!r}")
    impl = facts.get("implementation")
    if not isinstance(impl, dict):
        raise ValueError("run.implementation must be a mapping")
    implementation = Implementation(**{**impl, "contact": tuple(impl.get("contact") or ())})
    tuples = {k: tuple(facts[k]) for k in ("nodes", "profiles") if isinstance(facts.get(k), list)}
    run = RunInfo(**{**facts, **tuples, "implementation": implementation})
    return run, interrupted, options


# --- checking --------------------------------------------------------------------------------------


def check(doc: Mapping[str, Any], report: Path, directory: Path | None = None) -> Verdict:
    """Whether the report ``doc`` (read from the file ``report``) is what its evidence makes: the
    evidence is in ``directory``, else where ``locate`` finds it."""
    if SECTION not in doc:
        return Verdict([], "it has no evidence: section, so its outcomes cannot be checked against the "
                           "run's results (a report of an lbconform without evidence, or one edited)")
    files = files_of(doc)
    lacking = [name for name in (RESULTS_FILE, RUN_FILE) if name not in files]
    if lacking:
        return Verdict([], f"its evidence: section names no {' and no '.join(lacking)}")
    folder = directory or locate(report)
    if folder is None:
        return Verdict([], f"its evidence is missing: no {report.with_suffix('').name}/ and no "
                           f"{EVIDENCE_DIR}/ beside it")
    section = doc[SECTION]
    entries = (section.get("files") or ()) if isinstance(section, dict) else ()
    named = [f.get("path") for f in entries if isinstance(f, dict)]
    problems = [f"evidence {name}: named twice in the evidence: section"
                for name in sorted({n for n in named if isinstance(n, str) and named.count(n) > 1})]
    missing = []
    for name, digest in files.items():
        path = folder / name
        if not path.resolve().is_relative_to(folder.resolve()):
            problems.append(f"evidence {name}: outside the folder of evidence")
            continue
        try:
            actual = sha256(path) if path.is_file() else None
        except OSError as exc:
            missing.append(f"{name} ({exc.strerror or exc})")
            continue
        if actual is None:
            missing.append(name)
        elif actual != digest:
            problems.append(f"evidence {name}: sha256 differs (the report says {digest[:12]}..., the file's "
                            f"is {actual[:12]}...)")
    if missing and not problems:
        return Verdict([], f"its evidence is missing: no readable {', '.join(missing)} in {folder}/")
    if problems:
        # Evidence that is not the report's: what it would make says nothing of the report.
        return Verdict(problems + [f"evidence {name}: missing from {folder}/" for name in missing])
    try:
        evidence = read(folder)
    except EvidenceError as exc:
        return Verdict([f"evidence {exc}"])
    declaration = evidence.options.get("declaration")
    if declaration is not None and declaration not in files:
        problems.append(f"evidence {RUN_FILE}: options.declaration: {schema.quote(declaration)} is not a "
                        "file the evidence: section names")
    return Verdict(problems + compare.differences(doc, rebuild(evidence)))


def verify_report(path: Path, directory: Path | None = None) -> tuple[dict[str, Any], Verdict]:
    """``report verify``: the report in ``path`` and every problem of it: its shape against the
    schema, its arithmetic, then (when its shape holds) its evidence (``check``). A UsageError of one
    line for a file that is no conformance report, or not a whole one."""
    from lbconform.errors import UsageError

    doc = schema.load_report(path)
    if (why := schema.not_a_report(doc)) is not None:
        raise UsageError(f"{path} is not a conformance report: it holds {why}; name the "
                         "conformance-report.yaml a run wrote")
    if missing := schema.incomplete(doc):
        raise UsageError(f"{path} is not a whole conformance report: it has no {', '.join(missing)} "
                         "(a file cut short?)")
    shape = schema.validate(doc)
    problems = shape + schema.check_statistics(doc)
    if shape:
        return doc, Verdict(problems)
    verdict = check(doc, path, directory)
    return doc, Verdict(problems + verdict.problems, verdict.unverifiable)


def rebuild(evidence: Evidence) -> dict[str, Any]:
    """The report ``evidence`` makes, as a reader of its YAML gets it (evidence section aside)."""
    doc = conformance.build(evidence.results, evidence.measurements, evidence.run, evidence.interrupted)
    rebuilt: dict[str, Any] = yaml.safe_load(conformance.dump(doc))
    return rebuilt
