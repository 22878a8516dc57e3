"""``lbconform report submit``: a run's verified report and its evidence, filed the way Gateway API
files its implementations' conformance reports, ready to propose to a repository of reports.

``submit(report_dir, into)`` writes::

    OUT/<lbconform version>/<organization>-<project>/
        README.md                                 the folder's reports, and how to run each again
        <implementation version>-<mode>-report.yaml   the report, byte for byte
        <implementation version>-<mode>-report/       its evidence (results.jsonl, run.json, ...)

Names are made safe for paths (``safe``: lowercase, ``[a-z0-9.-]``). The report is copied
unedited: its ``evidence:`` section names files by their path in the folder of evidence, which
``report verify`` finds beside a submitted report by its stem. The README is the folder's: its
table and its "Reproduce" commands sit between two markers and are written again from every
report in the folder at each submit, so a second version or mode adds a row; what a vendor writes
outside the markers stays. A report is refused (one line) unless it verifies against its
evidence, names its organization and project and its version, and claims something: only
``success`` and ``partial`` profiles are submitted, as Gateway API lists only those.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from lbconform import options
from lbconform.errors import UsageError
from lbconform.report import conformance, evidence
from lbconform.report.collector import REPORT_FILE
from lbconform.report.model import UNKNOWN

README: Final = "README.md"
BEGIN: Final = "<!-- lbconform report submit: the table and the commands below are written at each submit -->"
END: Final = "<!-- end of lbconform report submit -->"
#: Profile results a submitted report may have: the others claim nothing (Gateway API lists only these).
CLAIMS: Final = (conformance.SUCCESS, conformance.PARTIAL)
#: Options the Reproduce command leaves out: the submitter's own cluster and client, and the run's id.
NOT_REPEATED: Final = ("kubeconfig", "context", "run_id", "client_address", "client_netns")
#: Where the kubeconfig goes in a Reproduce command: the reader's own cluster.
KUBECONFIG: Final = "K"
_UNSAFE: Final = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True)
class Submission:
    """Where ``submit`` filed a report."""

    folder: Path
    report: Path
    evidence: Path
    readme: Path


def safe(text: str) -> str:
    """``text`` as a name in a path: lowercase, runs of anything but ``[a-z0-9.-]`` one ``-``, no
    ``.`` or ``-`` at either end (so never ``.`` or ``..``); empty when nothing is left."""
    return _UNSAFE.sub("-", text.lower()).strip(".-")


def _name(doc: dict[str, Any], section: str, key: str, how: str) -> str:
    value = str((doc.get(section) or {}).get(key) or "")
    if value in ("", UNKNOWN):
        raise UsageError(f"the report has no {section}.{key}: {how}")
    name = safe(value)
    if not name:
        raise UsageError(f"the report's {section}.{key} {value!r} has no letter or digit to name a file by")
    return name


def submit(report_dir: Path, into: Path, *, replace: bool = False) -> Submission:
    """File the report of the run whose ``--report-dir`` was ``report_dir`` under ``into``."""
    path = report_dir / REPORT_FILE
    if not path.is_file():
        raise UsageError(f"no {REPORT_FILE} in {report_dir}/: name the --report-dir of the run to submit")
    doc, verdict = evidence.verify_report(path)
    if verdict.problems:
        more = f" and {len(verdict.problems) - 1} more" if len(verdict.problems) > 1 else ""
        raise UsageError(f"{path} does not verify ({verdict.problems[0]}{more}): `lbconform report verify "
                         f"{path}` lists every problem")
    if verdict.unverifiable is not None:
        raise UsageError(f"{path} is unverifiable ({verdict.unverifiable}): only a report with its "
                         "evidence is submitted")
    claimless = [f"{p['name']} is {p['result']}" for p in doc["profiles"] if p["result"] not in CLAIMS]
    if claimless:
        raise UsageError(f"{path}: {', '.join(claimless)}: only {' and '.join(CLAIMS)} results are submitted "
                         "(a failed test, tests that broke or an interrupted run claim nothing)")
    missing = [k for k in ("organization", "project") if (doc["implementation"].get(k) or UNKNOWN) == UNKNOWN]
    if missing:
        flags = " and ".join(f"--{k}" for k in missing)
        fields = " and ".join(f"implementation.{k}" for k in missing)
        raise UsageError(f"the report has no {fields}: run with {flags}, or give {fields} in the "
                         "declaration file (--declaration)")
    organization = _name(doc, "implementation", "organization", "")
    project = _name(doc, "implementation", "project", "")
    version = _name(doc, "implementation", "version", "run with --implementation-version, or give "
                    "implementation.version in the declaration file (--declaration)")
    mode = _name(doc, "target", "mode", "the run's provider names no mode")
    lbconform = _name(doc, "metadata", "lbconformVersion", "the report names no lbconform version")

    folder = into / lbconform / f"{organization}-{project}"
    stem = f"{version}-{mode}-report"
    target, target_evidence = folder / f"{stem}.yaml", folder / stem
    if (target.exists() or target_evidence.exists()) and not replace:
        raise UsageError(f"{target} exists: pass --replace to replace it and its evidence")
    source_evidence = evidence.locate(path)
    assert source_evidence is not None  # it verified
    readme = folder / README
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if target_evidence.is_dir():
            shutil.rmtree(target_evidence)
        shutil.copyfile(path, target)
        for name in evidence.files_of(doc):
            (target_evidence / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source_evidence / name, target_evidence / name)
        _, copied = evidence.verify_report(target)
        wrong = copied.problems[:1] or ([copied.unverifiable] if copied.unverifiable else [])
        if wrong:  # only a bug in this module gets here
            raise UsageError(f"{target}: the copy does not verify: {wrong[0]}")
        readme.write_text(update_readme(readme.read_text(encoding="utf-8") if readme.is_file() else None,
                                        doc, folder), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--into {into}: cannot write there ({exc.strerror or exc})") from None
    return Submission(folder, target, target_evidence, readme)


# --- the README ------------------------------------------------------------------------------------


def update_readme(text: str | None, doc: dict[str, Any], folder: Path) -> str:
    """The folder's README with its table and commands written again from ``folder``'s reports:
    ``text`` with what lies between the markers replaced (the block appended where it has none),
    or a new README titled after the implementation of ``doc``."""
    block = f"{BEGIN}\n{render(folder)}{END}\n"
    if text is None:
        impl = doc["implementation"]
        url = f"\n\n<{impl['url']}>" if str(impl.get("url") or "").startswith(("https://", "http://")) else ""
        return (f"# {impl['organization']} {impl['project']}{url}\n\nConformance reports of "
                f"{impl['project']} for Service type=LoadBalancer, made by lbconform, each with the "
                f"evidence it was built from.\n\n{block}")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1].lstrip("\n")
    return text.rstrip("\n") + "\n\n" + block


def render(folder: Path) -> str:
    """The table of the reports in ``folder`` and the command that made each (Markdown)."""
    rows, commands = [], []
    for path in sorted(folder.glob("*-report.yaml")):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            run = doc["metadata"]["lbconformVersion"], doc["implementation"]["version"], doc["target"]["mode"]
            profiles = ", ".join(f"{p['name']}: {p['result']}" for p in doc["profiles"])
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            rows.append(f"| ? | ? | ? | unreadable ({type(exc).__name__}) | [{path.name}](./{path.name}) |")
            continue
        cells = [*(str(c) for c in run), profiles, f"[{path.name}](./{path.name})"]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        commands += ["", f"### {run[1]}, mode {run[2]}", "", "```sh",
                     f"pip install 'lbconform=={run[0]}'", reproduce(path), "```"]
    return "\n".join([
        "## Reports", "",
        "| lbconform version | implementation version | mode | profiles | report |",
        "| --- | --- | --- | --- | --- |", *rows, "",
        "## Reproduce", "",
        f"Each report was made by the command under its name, run from this folder with the lbconform "
        f"version it names, `{KUBECONFIG}` being your cluster's kubeconfig (a lab report needs none: "
        "it runs the hermetic lab of lbconform-lab). `lbconform report verify REPORT` checks a report "
        "against its evidence.", *commands]) + "\n"


def reproduce(report: Path) -> str:
    """The ``lbconform run`` command that made the submitted report in ``report``, from the run's
    parameters in its evidence; a comment when they cannot be read."""
    folder = evidence.locate(report)
    try:
        if folder is None:
            raise evidence.EvidenceError("no folder of evidence beside it")
        found = evidence.read(folder)
    except evidence.EvidenceError as exc:
        return f"# the run's parameters cannot be read: {exc}"
    declaration = found.options.get("declaration")
    return command(found, f"{folder.name}/{declaration}" if declaration else None)


def command(found: evidence.Evidence, declaration: str | None) -> str:
    """``lbconform run`` with the options of the run in ``found`` (``declaration``: the path of its
    copy), folded at about 100 characters."""
    run, given = found.run, found.options
    words: list[list[str]] = [["lbconform", "run"]]
    if run.target != "lab":
        words.append(["--kubeconfig", KUBECONFIG])
    for option in options.RUN_OPTIONS:
        value = given.get(option.dest)
        if option.dest in NOT_REPEATED:
            continue
        if option.dest == "provider":
            value = value or run.provider
        elif option.dest == "mode":
            value = value or (run.mode if run.mode not in ("default", UNKNOWN) else None)
        elif option.dest == "profile":
            value = value or list(run.profiles)
        elif option.dest == "declaration":
            value = declaration if value else None
        if option.switch:
            words += [[option.flag]] if value else []
        elif option.repeat:
            words += [[option.flag, str(item)] for item in value or ()]
        elif value:
            words.append([option.flag, str(value)])
    workers = given.get("workers")
    if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1:
        words.append(["-n", str(workers)])
    selection = [[flag, str(given[key])] for flag, key in (("-k", "keyword"), ("-m", "markexpr"))
                 if given.get(key)]
    if selection:
        words += [["--"], *selection]
    lines = [""]
    for group in words:
        part = " ".join(w if w == KUBECONFIG else shlex.quote(w) for w in group)
        if lines[-1] and len(lines[-1]) + len(part) > 96:
            lines.append("    ")
        lines[-1] += (" " if lines[-1].strip() else "") + part
    return " \\\n".join(lines)
