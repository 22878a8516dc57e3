"""The ``lbconform`` command: the only module that prints.

Every user error surfaces as one line, ``lbconform: error: ...``, and a non-zero exit.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, runtime_checkable

from lbconform import options
from lbconform.errors import LbconformError
from lbconform.signals import Stopped

DESCRIPTION = ("Conformance and chaos tests for Kubernetes Service type=LoadBalancer implementations: "
               "'lbconform run --kubeconfig K --provider P' certifies your cluster's load balancer.")

#: Distributions add commands of their own here (lbconform-lab: ``lab`` and ``bench``).
COMMANDS_GROUP = "lbconform.commands"


@runtime_checkable
class Command(Protocol):
    """A command a distribution adds: it adds its subparser, whose ``func`` runs it."""

    def add_to(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


def commands() -> list[Command]:
    found = []
    for ep in entry_points(group=COMMANDS_GROUP):
        command = ep.load()()
        if isinstance(command, Command):
            found.append(command)
    return found


def _say(msg: str) -> None:
    print(f"lbconform: {msg}", file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    from lbconform.run import RunOptions, run

    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    values = {o.dest: getattr(args, o.dest) for o in options.RUN_OPTIONS}
    opts = RunOptions(**values, workers=args.workers, report_dir=Path(args.report_dir),
                      keep_lab=args.keep_lab, pytest_args=extra)
    return run(opts, _say)


def cmd_report(args: argparse.Namespace) -> int:
    """summary.md from the run's conformance report and datasheet (and the HTML report, asked)."""
    from lbconform.report.collector import DATASHEET_FILE, REPORT_FILE, SUMMARY_FILE
    from lbconform.report.schema import load_report
    from lbconform.report.summary import render

    report_dir = Path(args.report_dir)
    path = report_dir / REPORT_FILE
    if not path.is_file():
        raise LbconformError(f"no {REPORT_FILE} in {report_dir}/: run `lbconform run` first, or name its "
                             "--report-dir")
    sheet = report_dir / DATASHEET_FILE
    (report_dir / SUMMARY_FILE).write_text(
        render(load_report(path), sheet.read_text(encoding="utf-8") if sheet.is_file() else None),
        encoding="utf-8")
    print(f"summary: {report_dir / SUMMARY_FILE}")
    # --- the HTML report (lbconform.report.html) ---
    if getattr(args, "html", False) or getattr(args, "single_file", False):
        from lbconform.report.html import run_html

        return run_html(args)
    return 0


#: ``report verify``: the report holds together, but there is no evidence to check its outcomes against.
EXIT_UNVERIFIABLE = 3


def cmd_report_verify(args: argparse.Namespace) -> int:
    """Check a conformance report against the schema, its arithmetic and its evidence; every
    problem, one a line (exit 1); a report without its evidence is unverifiable (exit 3)."""
    from lbconform.report.evidence import verify_report
    from lbconform.report.model import lbconform_version

    path = Path(args.file)
    doc, verdict = verify_report(path, Path(args.evidence) if args.evidence else None)
    for problem in verdict.problems:
        print(f"{path}: {problem}")
    if verdict.problems:
        made_by = str((doc.get("metadata") or {}).get("lbconformVersion", "?"))
        other = (f"; it was made by lbconform {made_by}, this is {lbconform_version()}: verify it with "
                 f"{made_by}") if made_by != lbconform_version() else ""
        print(f"lbconform: {path} is not a valid conformance report ({len(verdict.problems)} problem(s)"
              f"{other})", file=sys.stderr)
        return 1
    if verdict.unverifiable is not None:
        print(f"lbconform: {path} is unverifiable: {verdict.unverifiable}", file=sys.stderr)
        return EXIT_UNVERIFIABLE
    tests = sum(sum(p["statistics"].values()) for p in doc["profiles"])
    print(f"{path}: a valid conformance report ({len(doc['profiles'])} profile(s), {tests} test(s)), "
          "every outcome as its evidence gives it")
    return 0


def cmd_report_submit(args: argparse.Namespace) -> int:
    """File a verified report with its evidence under --into, as Gateway API files its reports."""
    from lbconform.report.submit import submit

    done = submit(Path(args.submit_report_dir or args.report_dir), Path(args.into), replace=args.replace)
    print(f"report: {done.report}")
    print(f"evidence: {done.evidence}/")
    print(f"README: {done.readme}")
    return 0


def cmd_declaration_show(args: argparse.Namespace) -> int:
    """A provider's declaration in the file format: where a vendor's own declaration starts."""
    from lbconform.declaration import show

    print(show(args.provider, args.mode), end="")
    return 0


def cmd_declaration_check(args: argparse.Namespace) -> int:
    """Check a declaration file, over a provider's claims, as ``lbconform run --declaration`` does."""
    from lbconform import providers
    from lbconform.declared_provider import FROM_DECLARATION, apply_declaration

    provider = providers.load(args.provider)
    if args.mode is not None:
        provider.set_mode(args.mode)
    declared = apply_declaration(provider, args.file)
    sources = declared.provenance().values()
    own = sum(s["from"] == FROM_DECLARATION for s in sources)
    features = "its own" if declared.declaration.features is not None else "the provider's"
    print(f"{args.file}: a valid declaration over the {provider.name} provider: {own} of {len(sources)} "
          f"declared values its own, features {features}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from lbconform.config import parse_duration
    from lbconform.kube.rawapi import RawApi, api_client
    from lbconform.kube.sweeper import sweep
    from lbconform.localcluster import kubeconfig_of

    try:
        older = parse_duration(args.older_than)
    except ValueError as exc:
        raise LbconformError(str(exc)) from None
    api = RawApi(api_client(kubeconfig_of(args.kubeconfig), args.context))
    result = sweep(api, run_id=args.run_id, older_than=older)
    print(f"deleting {len(result.namespaces)} namespaces: {' '.join(result.namespaces) or '-'}")
    print(f"restored {len(result.nodes)} nodes: {' '.join(result.nodes) or '-'}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lbconform", description=DESCRIPTION)
    p.add_argument("-v", "--verbose", action="store_true", help="log what the library does")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the conformance suites against a cluster (or the local lab)")
    options.add_all(run.add_argument, pytest=False)
    run.add_argument("-n", "--workers", type=int, default=2, help="test processes (default: 2)")
    run.add_argument("--report-dir", default="reports", help="where results land (default: reports/)")
    run.add_argument("--keep-lab", action="store_true", help="leave a local cluster this run booted running")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest (-k NAME)")
    run.set_defaults(func=cmd_run)

    report = sub.add_parser("report", help="summary.md (and the HTML report) from a run's reports/; "
                                           "'report verify FILE' checks a conformance report, "
                                           "'report submit' files one")
    report.add_argument("--report-dir", default="reports", help="the run's --report-dir (default: reports/)")
    report.set_defaults(func=cmd_report)
    # --- the HTML report's options (lbconform.report.html) ---
    from lbconform.report.html import add_html_arguments

    add_html_arguments(report)
    # --- end of the HTML report's options ---
    report_sub = report.add_subparsers(dest="report_action")
    verify = report_sub.add_parser(
        "verify", help="check a conformance report: schema, statistics, and every outcome against the "
                       "run's evidence (exit 1: not valid; 3: unverifiable, no evidence)")
    verify.add_argument("file", help="conformance-report.yaml (or .json)")
    verify.add_argument("--evidence", metavar="DIR", help="its evidence (default: the folder of the "
                                                           "report's name beside it, else evidence/)")
    verify.set_defaults(func=cmd_report_verify)
    submit = report_sub.add_parser(
        "submit", help="file a run's verified report and its evidence as OUT/<lbconform version>/"
                       "<organization>-<project>/, with a README to propose")
    # Its own dest: the subcommand's default would overwrite 'report --report-dir DIR submit'.
    submit.add_argument("--report-dir", dest="submit_report_dir", metavar="DIR",
                        help="the run's --report-dir (default: reports/)")
    submit.add_argument("--into", required=True, metavar="OUT",
                        help="the reports folder to file it in (a checkout of the reports' repository)")
    submit.add_argument("--replace", action="store_true",
                        help="replace a report of the same implementation version and mode")
    submit.set_defaults(func=cmd_report_submit)

    declaration = sub.add_parser("declaration", help="what an implementation claims, as a file for "
                                                     "'run --declaration': 'show' one, 'check' one")
    declaration_sub = declaration.add_subparsers(dest="declaration_action", required=True)
    show = declaration_sub.add_parser("show", help="print a provider's declaration as a declaration file "
                                                   "(YAML): a start for your own")
    show.add_argument("--provider", required=True, help="an installed provider: generic, kind, metallb, ...")
    show.add_argument("--mode", help="the provider's mode (default: its default)")
    show.set_defaults(func=cmd_declaration_show)
    check = declaration_sub.add_parser("check", help="check a declaration file without a cluster")
    check.add_argument("file", help="the declaration (YAML or JSON)")
    check.add_argument("--provider", default="generic", help="the provider it overrides (default: generic)")
    check.add_argument("--mode", help="the provider's mode (default: its default)")
    check.set_defaults(func=cmd_declaration_check)

    sweep = sub.add_parser("sweep", help="remove what killed runs left (only objects with the run label)")
    sweep.add_argument("--kubeconfig", help="the cluster (default: the local cluster, the lab)")
    sweep.add_argument("--context")
    sweep.add_argument("--run-id", help="only this run's objects")
    sweep.add_argument("--older-than", default="1h", help="without --run-id: namespaces older than this")
    sweep.set_defaults(func=cmd_sweep)

    for command in commands():
        command.add_to(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    try:
        return int(args.func(args))
    except LbconformError as exc:
        print(f"lbconform: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:
        print(f"lbconform: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("lbconform: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
