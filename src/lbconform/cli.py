"""The ``lbconform`` command: the only module that prints.

Every user error surfaces as one line, ``lbconform: error: ...``, and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from lbconform.errors import LbconformError, UsageError
from lbconform.lab import build, topology
from lbconform.lab.cluster import DEFAULT_API_PORT, LBS, REFERENCE_LB, Lab
from lbconform.lab.lb.client import LabLB
from lbconform.lab.lb.params import MODES


def _say(msg: str) -> None:
    print(f"lbconform: {msg}", file=sys.stderr, flush=True)


def _lab(args: argparse.Namespace) -> Lab:
    return Lab(progress=_say)


def cmd_lab_build(args: argparse.Namespace) -> int:
    dirs = build.Builder(progress=_say).build_all(with_=tuple(args.with_ or ()))
    for d in dirs:
        print(d)
    return 0


def cmd_lab_up(args: argparse.Namespace) -> int:
    lab = _lab(args)
    report = lab.up(node_count=args.nodes, api_port=args.api_port, lb_defects=tuple(args.lb_defect),
                    lb_mode=args.lb_mode, lb=args.lb)
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in report.phases.items())
    print(f"lab is up: {args.nodes} nodes Ready in {report.total:.1f}s ({phases})")
    print(f"  kubectl:  lbconform lab kubectl get nodes  (or KUBECONFIG={lab.dir.kubeconfig} kubectl)")
    print(f"  client:   lbconform lab exec -- curl http://{topology.Node(1).ip}:NODEPORT/hostname")
    print("  down:     lbconform lab down")
    return 0


def cmd_lab_down(args: argparse.Namespace) -> int:
    removed = _lab(args).down()
    print("lab removed" if removed else "no lab was running")
    return 0


def cmd_lab_status(args: argparse.Namespace) -> int:
    st = _lab(args).status()
    if not st.running:
        print(f"no lab is running (lab directory {st.lab_dir})")
        return 1
    print(f"lab directory {st.lab_dir}, apiserver on 127.0.0.1:{st.api_port}")
    for name, alive in st.processes.items():
        print(f"  {name:28s} {'running' if alive else 'NOT RUNNING'}")
    if st.api_error:
        print(f"  apiserver unreachable: {st.api_error}")
    if st.processes and not any(st.processes.values()):
        print("  none of its processes runs: a leftover of a crash or a restart; "
              "remove it with 'lbconform lab down'")
    for n in st.nodes:
        agent = "up" if n.agent else "down"
        print(f"  {n.name:10s} agent {agent:5s} Ready={n.ready:8s} podCIDR={n.pod_cidr}")
    return 0 if all(st.processes.values()) and not st.api_error else 1


def cmd_lab_kubectl(args: argparse.Namespace) -> int:
    lab = _lab(args)
    lab.dir.read()
    kubectl = str(build.binary("kubectl"))
    os.execv(kubectl, [kubectl, f"--kubeconfig={lab.dir.kubeconfig}", *args.args])
    return 127


def cmd_lab_exec(args: argparse.Namespace) -> int:
    lab = _lab(args)
    lab.dir.read()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise LbconformError("lab exec needs a command: lbconform lab exec -- CMD [ARGS...]")
    argv = ["ip", "netns", "exec", topology.CLIENT_NS, "env",
            f"KUBECONFIG={lab.dir.lab_kubeconfig}", *command]
    os.execvp("ip", argv)
    return 127


def cmd_lab_node(args: argparse.Namespace) -> int:
    lab = _lab(args)
    if args.action == "kill":
        lab.kill_node(args.name)
    else:
        lab.start_node(args.name)
    return 0


def cmd_lab_lb(args: argparse.Namespace) -> int:
    lb = LabLB()
    if args.what == "state":
        print(json.dumps(lb.services(), indent=2, sort_keys=True))
    elif args.set is not None:
        print("defects:", " ".join(lb.set_defects(args.set, args.run)) or "none")
    else:
        print("defects:", " ".join(lb.defects(args.run)) or "none")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lbconform.run import RunOptions, run

    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    opts = RunOptions(
        kubeconfig=args.kubeconfig, context=args.context, provider=args.provider, mode=args.mode,
        profiles=args.profile or ["core"], features=args.features, exempt_features=args.exempt_features,
        timeouts=args.timeout, provider_options=args.provider_option, workers=args.workers,
        report_dir=Path(args.report_dir), keep_lab=args.keep_lab, allow_disruptive=args.allow_disruptive,
        client_address=args.client_address, run_id=args.run_id,
        implementation={"organization": args.organization, "project": args.project, "url": args.url,
                        "version": args.implementation_version},
        contacts=args.contact, pytest_args=extra)
    return run(opts, _say)


def cmd_report(args: argparse.Namespace) -> int:
    """summary.md from the run's conformance report and datasheet (and the HTML report, asked)."""
    from pathlib import Path

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


def cmd_report_verify(args: argparse.Namespace) -> int:
    """Check a conformance report against the schema and its arithmetic; every problem, one a line."""
    from pathlib import Path

    from lbconform.report.schema import load_report, not_a_report, verify

    path = Path(args.file)
    doc = load_report(path)
    if (why := not_a_report(doc)) is not None:
        raise UsageError(f"{path} is not a conformance report: it holds {why}; name the "
                         "conformance-report.yaml a run wrote")
    problems = verify(doc)
    for problem in problems:
        print(f"{path}: {problem}")
    if problems:
        print(f"lbconform: {path} is not a valid conformance report ({len(problems)} problem(s))",
              file=sys.stderr)
        return 1
    tests = sum(sum(p["statistics"].values()) for p in doc["profiles"])
    print(f"{path}: a valid conformance report ({len(doc['profiles'])} profile(s), {tests} test(s))")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from lbconform.config import parse_duration
    from lbconform.kube.rawapi import RawApi, api_client
    from lbconform.kube.sweeper import sweep

    try:
        older = parse_duration(args.older_than)
    except ValueError as exc:
        raise LbconformError(str(exc)) from None
    if args.kubeconfig:
        api = RawApi(api_client(args.kubeconfig, args.context))
    else:
        lab = _lab(args)
        lab.dir.read()
        api = lab.api()
    result = sweep(api, run_id=args.run_id, older_than=older)
    print(f"deleting {len(result.namespaces)} namespaces: {' '.join(result.namespaces) or '-'}")
    print(f"restored {len(result.nodes)} nodes: {' '.join(result.nodes) or '-'}")
    return 0


def cmd_bench_traffic(args: argparse.Namespace) -> int:
    from lbconform.traffic.bench import bench_traffic

    return bench_traffic(connections=args.connections, seconds=args.seconds, concurrency=args.concurrency,
                         say=_say)


def cmd_bench_lab(args: argparse.Namespace) -> int:
    from lbconform.lab.bench import bench_lab

    return bench_lab(nodes=args.nodes, rounds=args.rounds, say=_say, lb=args.lb)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lbconform", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log what the library does")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the conformance suites against the lab or a cluster")
    run.add_argument("--kubeconfig", help="target this cluster (default: the lab)")
    run.add_argument("--context", help="the kubeconfig context")
    run.add_argument("--provider", default="lab", help="the LB implementation's provider (default: lab)")
    run.add_argument("--mode", help="the implementation's mode (lab: node, nodeport, pod)")
    run.add_argument("--provider-option", action="append", default=[], metavar="NAME=VALUE",
                     help="an option of the provider (repeatable; see the README's providers table)")
    run.add_argument("--profile", action="append", default=[], metavar="PROFILE",
                     help="core, extended or chaos (repeatable; default: core)")
    run.add_argument("--features", action="append", default=[], metavar="FEATURE",
                     help="claim a feature the provider does not declare (repeatable)")
    run.add_argument("--exempt-features", action="append", default=[], metavar="FEATURE",
                     help="do not claim a feature: its tests report not supported (repeatable)")
    run.add_argument("--timeout", action="append", default=[], metavar="NAME=DURATION",
                     help="override a named timeout, e.g. lb_create=10m (repeatable)")
    run.add_argument("-n", "--workers", type=int, default=2, help="test processes (default: 2)")
    run.add_argument("--report-dir", default="reports", help="where results land (default: reports/)")
    run.add_argument("--keep-lab", action="store_true", help="leave a lab this run booted running")
    run.add_argument("--allow-disruptive", action="store_true",
                     help="let the chaos profile kill, drain and restart the nodes its experiments name")
    run.add_argument("--client-address", help="the client's address as backends see it, behind a NAT")
    run.add_argument("--run-id", help="label everything the run makes with this id (default: a random one); "
                                      "lowercase letters and digits, at most 16")
    run.add_argument("--organization", default="", help="report: who makes the implementation")
    run.add_argument("--project", default="", help="report: the implementation's name")
    run.add_argument("--url", default="", help="report: where the implementation lives")
    run.add_argument("--implementation-version", default="", help="report: the version under test")
    run.add_argument("--contact", action="append", default=[], help="report: who to ask (repeatable)")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest (-k NAME)")
    run.set_defaults(func=cmd_run)

    report = sub.add_parser("report", help="summary.md (and the HTML report) from a run's reports/; "
                                           "'report verify FILE' checks a conformance report")
    report.add_argument("--report-dir", default="reports", help="the run's --report-dir (default: reports/)")
    report.set_defaults(func=cmd_report)
    # --- the HTML report's options (lbconform.report.html) ---
    from lbconform.report.html import add_html_arguments

    add_html_arguments(report)
    # --- end of the HTML report's options ---
    report_sub = report.add_subparsers(dest="report_action")
    verify = report_sub.add_parser("verify", help="check a conformance report: schema and statistics")
    verify.add_argument("file", help="conformance-report.yaml (or .json)")
    verify.set_defaults(func=cmd_report_verify)

    sweep = sub.add_parser("sweep", help="remove what killed runs left (only objects with the run label)")
    sweep.add_argument("--kubeconfig", help="the cluster (default: the lab)")
    sweep.add_argument("--context")
    sweep.add_argument("--run-id", help="only this run's objects")
    sweep.add_argument("--older-than", default="1h", help="without --run-id: namespaces older than this")
    sweep.set_defaults(func=cmd_sweep)

    lab = sub.add_parser("lab", help="the hermetic lab cluster").add_subparsers(dest="lab", required=True)
    lab_build = lab.add_parser("build", help="build the lab's binaries (cached)")
    lab_build.add_argument("--with", dest="with_", action="append", metavar="NAME",
                           choices=sorted(build.OPTIONAL),
                           help="also build a load balancer the lab can host: "
                           + ", ".join(sorted(build.OPTIONAL)) + " (repeatable)")
    lab_build.set_defaults(func=cmd_lab_build)
    up = lab.add_parser("up", help="boot the lab")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--api-port", type=int, default=DEFAULT_API_PORT,
                    help="loopback port that forwards to the apiserver")
    up.add_argument("--lb-defect", action="append", default=[], metavar="NAME",
                    help="start the reference load balancer with this defect (repeatable)")
    up.add_argument("--lb-mode", choices=MODES,
                    help="the reference LB's default backend mode, node unless told "
                         "(per Service: lab.lbconform.io/mode)")
    up.add_argument("--lb", default=REFERENCE_LB, metavar="NAME",
                    help=f"the lab's load balancer: {', '.join(LBS)} (default: {REFERENCE_LB}; the others "
                         "need 'lbconform lab build --with NAME')")
    up.set_defaults(func=cmd_lab_up)
    lb = lab.add_parser("lb", help="the reference load balancer's state and defects")
    lb.add_argument("what", choices=("state", "defects"))
    lb.add_argument("--set", nargs="*", metavar="DEFECT",
                    help="with 'defects': switch to these (none: clear)")
    lb.add_argument("--run", metavar="RUN_ID",
                    help="with 'defects': only for the Services of this run (lbconform run --run-id)")
    lb.set_defaults(func=cmd_lab_lb)
    lab.add_parser("down", help="remove everything the lab made").set_defaults(func=cmd_lab_down)
    lab.add_parser("status", help="what runs").set_defaults(func=cmd_lab_status)
    kc = lab.add_parser("kubectl", help="the built kubectl against the lab")
    kc.add_argument("args", nargs=argparse.REMAINDER)
    kc.set_defaults(func=cmd_lab_kubectl)
    ex = lab.add_parser("exec", help="run a command in the client namespace")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_lab_exec)
    node = lab.add_parser("node", help="kill or start a node")
    node.add_argument("action", choices=("kill", "start"))
    node.add_argument("name")
    node.set_defaults(func=cmd_lab_node)

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    bl = bench.add_parser("lab", help="boot time and memory of the lab")
    bl.add_argument("--nodes", type=int, default=3)
    bl.add_argument("--rounds", type=int, default=3)
    bl.add_argument("--lb", default=REFERENCE_LB, metavar="NAME",
                    help=f"also measure the lab with this LB ({', '.join(LBS)}), beside the reference-LB lab")
    bl.set_defaults(func=cmd_bench_lab)
    bt = bench.add_parser("traffic", help="the traffic engines beside wrk, against a lab VIP")
    bt.add_argument("--connections", type=int, default=10_000, help="long-lived connections to hold")
    bt.add_argument("--seconds", type=int, default=10, help="duration of each rate measurement")
    bt.add_argument("--concurrency", type=int, default=64, help="requests in flight in the rate measurements")
    bt.set_defaults(func=cmd_bench_traffic)
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
    except KeyboardInterrupt:
        print("lbconform: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
