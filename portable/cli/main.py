"""``portable``: the command line. Each subcommand lives in its own module and registers here.

Example:
    $ portable --version
    $ portable devices
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module providing ``add_arguments(parser)`` and ``run(args) -> int``
SUBCOMMANDS = {
    "devices": "portable.cli.devices",
    "digits": "portable.cli.digits",
}


def build_parser() -> argparse.ArgumentParser:
    import portable

    parser = argparse.ArgumentParser(prog="portable", description=(
        "portable: train, export and run neural networks from a phone to a cluster."))
    parser.add_argument("--version", action="version", version=f"portable {portable.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().splitlines()[0]
        command = sub.add_parser(name, help=doc, description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from portable.errors import PortableError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(args.run(args) or 0)
    except PortableError as exc:
        print(f"portable {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
