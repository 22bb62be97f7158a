"""Convert a model between ONNX and portable's deployment format (a JSON graph plus safetensors
weights that a device reads with NumPy alone, its weights memory-mapped).

SRC is an .onnx file or a deployment file (told apart by their first bytes). The format written
follows DST's suffix (``.onnx``: ONNX, anything else: the deployment format, usually
``.portable``) unless ``--format`` says otherwise.

Example:
    $ portable export runs/lenet/model.onnx -o lenet.portable
    $ portable export lenet.portable -o lenet.onnx --opset 17 --json
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Mapping

from portable.cli.arguments import positive_int

FORMATS = ("portable", "onnx")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="an .onnx file or a deployment file")
    parser.add_argument("-o", "--output", metavar="DST", required=True,
                        help="the file to write (.portable: deployment format; .onnx: ONNX)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="what to write (default: onnx for a .onnx DST, else portable)")
    parser.add_argument("--opset", type=positive_int, default=None,
                        help="ai.onnx opset of an ONNX DST (default: the newest onnxruntime "
                        "runs)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    result = convert(args.source, args.output, args.format, args.opset)
    if args.json:
        print(json.dumps(result))
    else:
        from portable.sizes import format_bytes

        print(f"wrote {result['path']} ({result['format']}): {result['nodes']} nodes, "
              f"{result['tensors']} tensors ({format_bytes(result['tensor_bytes'])}), "
              f"{format_bytes(result['bytes'])} in all")
    return 0


def output_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """``fmt``, or the format ``path``'s suffix implies (``.onnx``: onnx, else portable)."""
    if fmt is not None:
        return fmt
    return "onnx" if os.fspath(path).lower().endswith(".onnx") else "portable"


def convert(source: str | os.PathLike, path: str | os.PathLike, fmt: str | None = None,
            opset: int | None = None, metadata: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """Read ``source`` (ONNX or deployment file) and write it to ``path`` as ``fmt``.

    Args:
        source: an .onnx file or a deployment file.
        path: the file to write (atomically).
        fmt: ``portable`` or ``onnx`` (default: from ``path``'s suffix).
        opset: the ai.onnx opset of an ONNX output.
        metadata: JSON-able facts kept in a deployment output (beside ``source`` and
            ``producer``, and whatever a deployment source carried).

    Returns:
        ``{"source", "path", "format", "nodes", "tensors", "tensor_bytes", "bytes"}`` (and
        ``"opset"`` for ONNX).

    Example:
        >>> convert("lenet.onnx", "lenet.portable")["tensors"]   # doctest: +SKIP
        8
    """
    from portable.errors import PortableError
    from portable.predict import deployment

    fmt = output_format(path, fmt)
    if fmt not in FORMATS:
        raise PortableError(f"unknown export format {fmt!r}; choose one of {FORMATS}")
    if opset is not None and fmt != "onnx":
        raise PortableError(f"--opset applies to ONNX output only; {os.fspath(path)} is "
                            f"written in the {fmt} format")
    if os.path.abspath(source) == os.path.abspath(path):
        raise PortableError(f"{os.fspath(path)}: the output would overwrite its source")
    graph, carried = _read(source)
    result: dict[str, Any] = {"source": os.fspath(source), "path": os.fspath(path),
                              "format": fmt, "nodes": len(graph.nodes)}
    if fmt == "portable":
        import portable

        info = {**carried, "source": os.path.basename(os.fspath(source)),
                "producer": f"portable {portable.__version__} export", **(metadata or {})}
        written = deployment.save(graph, path, metadata=info)
        result.update(tensors=written["tensors"], tensor_bytes=written["tensor_bytes"],
                      bytes=written["bytes"])
        return result
    from exporters.onnx import export_model
    from exporters.onnx.exporter import default_opset

    opset = default_opset() if opset is None else opset
    model = export_model(graph, None, path, opset)
    result.update(opset=opset, tensors=len(model.graph.initializer),
                  tensor_bytes=sum(_onnx_tensor_bytes(t) for t in model.graph.initializer),
                  bytes=os.path.getsize(path))
    return result


def _read(source: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """The graph in ``source`` (every initializer a constant) and the metadata it carries."""
    from portable.predict import deployment
    from portable.predict.formats import load_graph, sniff

    graph = load_graph(source)
    if sniff(os.fspath(source)) != "deployment":
        return graph, {}
    carried = deployment.describe(source)["metadata"]
    return graph, carried if isinstance(carried, dict) else {}


def _onnx_tensor_bytes(tensor: Any) -> int:
    from onnx import helper

    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
