"""Run the ONNX node conformance cases through portable's onnx.backend, case by case.

Each case runs in a worker process under a time limit; the report gives pass / fail / error per
op and in total (excluded cases are listed with their reasons).

Example:
    $ portable conformance --ops core --device cpu
    $ portable conformance --ops all --json > conformance.json
"""
from __future__ import annotations

import argparse
import json
import sys

from portable.cli.arguments import positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", choices=("cpu", "opencl", "cuda"))
    parser.add_argument("--ops", default="core", choices=("core", "all"),
                        help="core: the ops portable declares; all: every node case")
    parser.add_argument("--jobs", type=positive_int, default=None, help="worker processes")
    parser.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per case")
    parser.add_argument("--module", action="append", dest="modules", metavar="NAME",
                        help="run only this case module of onnx.backend.test.case.node "
                             "(e.g. relu; repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    parser.add_argument("--verbose", action="store_true", help="show the workers' stderr")


def run(args: argparse.Namespace) -> int:
    from exporters.onnx.backend import supports_device
    from exporters.onnx.conformance import format_report, run_conformance
    from portable.errors import BackendError

    if not supports_device(args.device):
        raise BackendError(f"device {args.device!r} is not available here "
                           f"(see `portable devices`)")

    def progress(entry: dict) -> None:
        if not args.json:
            print(f"\r{entry['status']:8} {entry['name'][:70]:70}", end="", file=sys.stderr)

    report = run_conformance(args.ops, args.device, args.jobs, args.timeout,
                             modules=args.modules, verbose=args.verbose, progress=progress)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print("", file=sys.stderr)
        print(format_report(report))
    return 0
