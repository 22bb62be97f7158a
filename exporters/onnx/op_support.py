"""Which standard ONNX ops portable runs, where, and why not: the README's op table.

Every op that the installed ``onnx`` package defines in the domains portable imports (ai.onnx,
ai.onnx.ml, ai.onnx.preview.training, ai.onnx.preview) gets one row: the newest version, whether
portable declares it, which backends have a kernel for it (an OpenCL kernel that refuses by
design, such as an op that needs the host, says so), whether it has a gradient, and for an op
portable does not run, the reason (``REASONS``; ``tests/exporters/test_op_support.py`` fails
when an op is missing both a declaration and a reason, or keeps a reason after it is declared).

The facts come from the op registry and the backends' kernel tables, found through the device
registry (``portable.device.BACKEND_MODULES``), so the table cannot drift from the code:
``python -m exporters.onnx.op_support --readme README.md`` rewrites the README's table between
its markers, and the test checks that the README holds what this module generates.

Example:
    >>> rows = support_rows()                                     # doctest: +SKIP
    >>> next(r for r in rows if r.op == "Relu").cpu               # doctest: +SKIP
    True
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
from dataclasses import dataclass

from portable.device import BACKEND_MODULES
from portable.ops import registry

DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")
BEGIN = "<!-- op-table:begin -->"
END = "<!-- op-table:end -->"

# Why an op that ONNX defines is not run by portable. Ops translated on import to another op
# (their deprecated forms) say which; the rest say what stands in the way.
_MAPS = "map values (and sequences of maps) are not IR types"
REASONS: dict[str, str] = {
    "Scatter": "deprecated; read as ScatterElements on import",
    "Upsample": "deprecated; read as Resize on import",
    **{f"ai.onnx.ml.{op}": _MAPS for op in ("CastMap", "DictVectorizer", "ZipMap")},
    "ai.onnx.preview.training.Gradient": ("portable differentiates graphs itself "
                                          "(portable.passes.autodiff); the op is not read"),
}


@dataclass(frozen=True)
class SupportRow:
    """One standard op: where portable runs it."""

    domain: str
    op: str
    version: int
    declared: bool
    cpu: bool
    opencl: str          # "yes", "host only", "no", or why the column is unknown
    gradient: bool
    reason: str

    @property
    def qualified(self) -> str:
        """The name portable's registry uses (domain-qualified outside ai.onnx)."""
        return f"{self.domain}.{self.op}" if self.domain else self.op


def _kernel_table(device_type: str) -> dict | None:
    """A backend's kernel table, or None when the backend cannot be imported here."""
    module_name = BACKEND_MODULES[device_type][0]
    try:
        module = importlib.import_module(module_name)
        if device_type == "opencl":
            module = importlib.import_module(f"{module_name}.kernels")
    except ImportError:
        return None
    table = getattr(module, "kernel_table", None)  # (the NumPy backend builds its table)
    return table() if callable(table) else getattr(module, "kernels", None)


def _opencl_cell(table: dict | None, name: str) -> str:
    if table is None:
        return "pyopencl absent"
    kernel = table.get(name)
    if kernel is None:
        return "no"
    return "host only" if kernel.__name__.startswith("refuse_") else "yes"


def standard_ops() -> list[tuple[str, str, int, bool]]:
    """(domain, op, newest version, deprecated) for every op of ``DOMAINS`` in ``onnx.defs``."""
    from onnx import defs

    newest: dict[tuple[str, str], tuple[int, bool]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in DOMAINS:
            continue
        key = (schema.domain, schema.name)
        if key not in newest or schema.since_version > newest[key][0]:
            newest[key] = (schema.since_version, bool(schema.deprecated))
    return sorted((d, op, v, dep) for (d, op), (v, dep) in newest.items())


def support_rows() -> list[SupportRow]:
    """One row per standard op, in domain then name order."""
    cpu, opencl = _kernel_table("cpu"), _kernel_table("opencl")
    rows = []
    for domain, op, version, deprecated in standard_ops():
        name = f"{domain}.{op}" if domain else op
        declared = name in registry.ops
        reason = REASONS.get(name, "")
        if not declared and not reason:
            reason = "deprecated in ONNX" if deprecated else "not implemented yet"
        rows.append(SupportRow(
            domain=domain, op=op, version=version, declared=declared,
            cpu=declared and cpu is not None and name in cpu,
            opencl=_opencl_cell(opencl, name) if declared else "no",
            gradient=declared and registry.ops[name].differentiable,
            reason="" if declared else reason))
    return rows


def markdown_table(rows: list[SupportRow]) -> str:
    """The rows as a Markdown table, with a one-line count above it."""
    ran = sum(r.cpu for r in rows)
    lines = [f"{ran} of the {len(rows)} ops that onnx {_onnx_version()} defines in "
             f"{', '.join(d or 'ai.onnx' for d in DOMAINS)} run on the CPU.", "",
             "| op | version | CPU | OpenCL | gradient | not run because |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.qualified} | {r.version} | {'yes' if r.cpu else 'no'} | "
                     f"{r.opencl} | {'yes' if r.gradient else '-'} | {r.reason} |")
    return "\n".join(lines)


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def replace_table(text: str, table: str, source: str = "README.md") -> str:
    """``text`` with what lies between the markers replaced by ``table``."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{source} has no op-table markers ({BEGIN!r} ... {END!r})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=pathlib.Path,
                        help="rewrite this file's op table (between its markers) in place")
    args = parser.parse_args(argv)
    table = markdown_table(support_rows())
    if args.readme is None:
        print(table)
        return 0
    text = args.readme.read_text(encoding="utf-8")
    updated = replace_table(text, table, str(args.readme))
    temporary = args.readme.with_suffix(args.readme.suffix + ".tmp")
    temporary.write_text(updated, encoding="utf-8")
    temporary.replace(args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
