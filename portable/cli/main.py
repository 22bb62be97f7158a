"""``portable``: the command line. Each subcommand lives in its own module and registers here.

Only the module of the command being run is imported, so ``portable devices`` does not pay
for importing onnx or matplotlib.

Example:
    $ portable --version
    $ portable devices
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module providing ``add_arguments(parser)`` and ``run(args) -> int``, summary)
SUBCOMMANDS = {
    "devices": ("portable.cli.devices", "list the devices portable can use here"),
    "digits": ("portable.cli.digits", "train a Symbol-API MLP or LeNet on the bundled digits"),
    "train": ("portable.cli.train", "train a zoo model on digits, MNIST or Fashion-MNIST"),
    "run": ("portable.cli.run", "run an ONNX model on given or random inputs"),
    "export": ("portable.cli.export", "convert a model between ONNX and the deployment format"),
    "predict": ("portable.cli.predict", "predict with a model inside a memory budget"),
    "conformance": ("portable.cli.conformance", "run the ONNX node conformance cases"),
    "memory": ("portable.cli.memory", "plan and measure a model's memory"),
    "launch": ("portable.cli.launch", "launch a distributed job over MPI"),
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``selected``'s module is imported to declare its options."""
    import portable

    parser = argparse.ArgumentParser(prog="portable", description=(
        "portable: train, export and run neural networks from a phone to a cluster."))
    parser.add_argument("--version", action="version", version=f"portable {portable.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in SUBCOMMANDS.items():
        command = sub.add_parser(name, help=summary, description=summary,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == selected:
            module = importlib.import_module(module_name)
            command.description = module.__doc__
            module.add_arguments(command)
            command.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from portable.errors import PortableError

    argv = sys.argv[1:] if argv is None else list(argv)
    selected = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(selected if selected in SUBCOMMANDS else None)
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
