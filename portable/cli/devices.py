"""List the devices portable can use here, and why the others are unavailable."""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from portable.device import available_devices

    found = available_devices()
    if args.json:
        print(json.dumps({str(d): text for d, text in found}))
    else:
        for device, text in found:
            print(f"{str(device):<10} {text}")
    return 0
