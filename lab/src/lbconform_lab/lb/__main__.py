"""Entry point: ``python -m lbconform_lab.lb --kubeconfig K --mode node [--defect D ...]
[--state-file F]``, run inside the LB's network namespace."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from lbconform.kube.rawapi import RawApi, api_client
from lbconform_lab.lb.api import serve
from lbconform_lab.lb.controller import Controller
from lbconform_lab.lb.params import MODES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lbconform-lab-lb")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--mode", choices=MODES, default="node")
    parser.add_argument("--defect", action="append", default=[])
    parser.add_argument("--state-file", type=Path, help="what a restarted LB starts from (see Controller)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    controller = Controller(RawApi(api_client(args.kubeconfig)), args.mode, set(args.defect), args.state_file)
    serve(controller)
    controller.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
