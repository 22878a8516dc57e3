"""The lab's commands, added to ``lbconform`` when lbconform-lab is installed (entry-point group
``lbconform.commands``): ``lbconform lab ...`` and ``lbconform bench ...``. The harness's CLI
knows none of them; it adds whatever a distribution registers."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lbconform.errors import LbconformError
from lbconform.signals import stoppable
from lbconform_lab import build, realnode, topology
from lbconform_lab.cluster import AGENT, CONTAINERD, DEFAULT_API_PORT, LBS, NODE_RUNTIMES, REFERENCE_LB, Lab
from lbconform_lab.lb.client import LabLB
from lbconform_lab.lb.params import MODES

SubParsers = argparse._SubParsersAction


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
    with stoppable():  # Ctrl-C or SIGTERM: the boot's teardown runs, then 130 or 143
        report = lab.up(node_count=args.nodes, api_port=args.api_port, lb_defects=tuple(args.lb_defect),
                        lb_mode=args.lb_mode, lb=args.lb, node_runtime=args.node_runtime)
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


def cmd_lab_crictl(args: argparse.Namespace) -> int:
    """The built crictl against one real node's containerd, in the node's namespaces (where its
    containerd serves the streams of exec and logs)."""
    lab = _lab(args)
    state = lab.dir.read()
    if state.node_runtime != CONTAINERD:
        raise LbconformError(f"lab crictl needs real nodes: this lab's nodes run the {state.node_runtime} "
                             "(lab up --node-runtime containerd)")
    node = topology.node_by_name(args.node, state.nodes)
    p = realnode.paths(node, lab.dir.node_dir(node.name))
    argv = realnode.enter_argv_plain(p, [str(build.binary("crictl")), f"--runtime-endpoint=unix://{p.socket}",
                                         f"--image-endpoint=unix://{p.socket}", *args.args])
    os.execvp(argv[0], argv)
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


def cmd_bench_traffic(args: argparse.Namespace) -> int:
    from lbconform_lab.bench_traffic import bench_traffic

    return bench_traffic(connections=args.connections, seconds=args.seconds, concurrency=args.concurrency,
                         say=_say)


def cmd_bench_lab(args: argparse.Namespace) -> int:
    from lbconform_lab.bench import bench_lab

    return bench_lab(nodes=args.nodes, rounds=args.rounds, say=_say, lb=args.lb,
                     node_runtime=args.node_runtime)




class LabCommands:
    """``lbconform lab`` (build, up, down, status, kubectl, exec, node, lb) and ``lbconform bench``."""

    def add_to(self, sub: SubParsers[argparse.ArgumentParser]) -> None:
        lab = sub.add_parser("lab", help="the hermetic lab cluster").add_subparsers(dest="lab", required=True)
        lab_build = lab.add_parser("build", help="build the lab's binaries (cached)")
        lab_build.add_argument("--with", dest="with_", action="append", metavar="NAME",
                               choices=sorted(build.OPTIONAL),
                               help="also build what the lab runs only when asked: a load balancer "
                               "it can host (kube-vip, metallb) or the real nodes' kubelet, containerd, "
                               "runc, CNI plugins and crictl (nodes); repeatable")
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
        up.add_argument("--node-runtime", default=AGENT, metavar="NAME",
                        help=f"what runs the nodes' pods: {', '.join(NODE_RUNTIMES)} (default: {AGENT}; "
                             f"{CONTAINERD}: the real kubelet with containerd and runc, built with "
                             "'lab build --with nodes')")
        up.add_argument("--lb", default=REFERENCE_LB, metavar="NAME",
                        help=f"the lab's load balancer: {', '.join(LBS)} (default: {REFERENCE_LB}; "
                             "the others "
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
        cr = lab.add_parser("crictl", help="the built crictl against a real node's containerd")
        cr.add_argument("node")
        cr.add_argument("args", nargs=argparse.REMAINDER)
        cr.set_defaults(func=cmd_lab_crictl)
        node = lab.add_parser("node", help="kill or start a node")
        node.add_argument("action", choices=("kill", "start"))
        node.add_argument("name")
        node.set_defaults(func=cmd_lab_node)

        bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
        bl = bench.add_parser("lab", help="boot time and memory of the lab")
        bl.add_argument("--nodes", type=int, default=3)
        bl.add_argument("--rounds", type=int, default=3)
        bl.add_argument("--lb", default=REFERENCE_LB, metavar="NAME",
                        help=f"also measure the lab with this LB ({', '.join(LBS)}), beside the "
                             "reference-LB lab")
        bl.add_argument("--node-runtime", default=AGENT, metavar="NAME",
                        help=f"with {CONTAINERD}, also measure the lab on real nodes, beside the "
                             "reference-LB lab on imitated nodes")
        bl.set_defaults(func=cmd_bench_lab)
        bt = bench.add_parser("traffic", help="the traffic engines beside wrk, against a lab VIP")
        bt.add_argument("--connections", type=int, default=10_000, help="long-lived connections to hold")
        bt.add_argument("--seconds", type=int, default=10, help="duration of each rate measurement")
        bt.add_argument("--concurrency", type=int, default=64,
                        help="requests in flight in the rate measurements")
        bt.set_defaults(func=cmd_bench_traffic)
