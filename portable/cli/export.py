"""Convert a model between ONNX and portable's deployment format (a JSON graph plus safetensors
weights that a device reads with NumPy alone, its weights memory-mapped), or a symbol file
(MXNet 1.x's ``model-symbol.json`` with its ``model-0000.params``, or portable's own) to either.

SRC is an .onnx file, a deployment file (told apart by their first bytes) or a symbol ``.json``
file. A symbol's parameters are ``--params``, or the ``<prefix>-NNNN.params`` beside
``<prefix>-symbol.json`` with the highest epoch; its inputs and their shapes are given by
``--input NAME:D1,D2,...`` (repeat it for several inputs). The format written follows DST's
suffix (``.onnx``: ONNX, anything else: the deployment format, usually ``.portable``) unless
``--format`` says otherwise.

Example:
    $ portable export runs/lenet/model.onnx -o lenet.portable
    $ portable export lenet.portable -o lenet.onnx --opset 17 --json
    $ portable export resnet18-symbol.json --input data:1,3,224,224 -o resnet18.onnx
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
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
    parser.add_argument("--input", dest="inputs", action="append", type=input_spec,
                        default=None, metavar="NAME:D1,D2,...",
                        help="an input of a symbol SRC and its shape (repeat for several)")
    parser.add_argument("--params", default=None, metavar="FILE",
                        help="the parameters of a symbol SRC (default: <prefix>-NNNN.params "
                        "beside <prefix>-symbol.json)")
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="a symbol SRC exported to ONNX runs at any batch size")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def input_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """``"data:1,3,224,224"`` -> ``("data", (1, 3, 224, 224))``."""
    name, _, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        shape = ()
    if not name or not shape or any(d < 1 for d in shape) or len(shape) > 32:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME:D1,D2,... with positive dimensions (e.g. data:1,3,224,224)")
    return name, shape


def run(args: argparse.Namespace) -> int:
    if is_symbol_file(args.source):
        result = convert_symbol(args.source, args.output, dict(args.inputs or []),
                                args.params, args.format, args.opset, args.dynamic_batch)
    else:
        for flag, given in (("--input", args.inputs), ("--params", args.params),
                            ("--dynamic-batch", args.dynamic_batch)):
            if given:
                from portable.errors import PortableError

                raise PortableError(f"{flag} applies to a symbol .json SRC only, not "
                                    f"{args.source}")
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

    fmt = _checked_format(path, fmt, opset)
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


def _checked_format(path: str | os.PathLike, fmt: str | None, opset: int | None) -> str:
    """The output format for ``path`` (``fmt`` or its suffix's), refusing an unknown one and an
    opset for a non-ONNX file."""
    from portable.errors import PortableError

    fmt = output_format(path, fmt)
    if fmt not in FORMATS:
        raise PortableError(f"unknown export format {fmt!r}; choose one of {FORMATS}")
    if opset is not None and fmt != "onnx":
        raise PortableError(f"--opset applies to ONNX output only; {os.fspath(path)} is "
                            f"written in the {fmt} format")
    return fmt


def is_symbol_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a symbol file (``.json``: MXNet's or portable's symbol JSON)."""
    return os.fspath(path).lower().endswith(".json")


def find_params(symbol_file: str | os.PathLike) -> str:
    """The parameters MXNet writes beside ``<prefix>-symbol.json``: ``<prefix>-NNNN.params``,
    the highest epoch when there are several.

    Raises:
        PortableError: none is there (names the pattern looked for).
    """
    from portable.errors import PortableError

    source = os.fspath(symbol_file)
    prefix = source[:-len("-symbol.json")] if source.endswith("-symbol.json") else \
        os.path.splitext(source)[0]
    pattern = re.compile(re.escape(os.path.basename(prefix)) + r"-(\d{4,})\.params")
    found = sorted((int(m.group(1)), path) for path in glob.glob(glob.escape(prefix) + "-*.params")
                   if (m := pattern.fullmatch(os.path.basename(path))))
    if not found:
        raise PortableError(f"{source}: no parameters {prefix}-NNNN.params beside it; "
                            f"give them with --params")
    return found[-1][1]


def convert_symbol(source: str | os.PathLike, path: str | os.PathLike,
                   inputs: Mapping[str, tuple[int, ...]], params: str | None = None,
                   fmt: str | None = None, opset: int | None = None,
                   dynamic_batch: bool = False) -> dict[str, Any]:
    """Convert a symbol file and its parameters (MXNet 1.x's, or portable's own) to ONNX or
    the deployment format, through ``SymbolBlock.imports`` and the block's inference graph.

    Args:
        source: ``<prefix>-symbol.json``.
        path: the file to write.
        inputs: the symbol's inputs by name, with their shapes (float32).
        params: the parameters file (default: ``find_params(source)``).
        fmt, opset: as in :func:`convert`.
        dynamic_batch: an ONNX output runs at any batch size.

    Returns:
        As :func:`convert`, with ``"params"`` (the parameters file read).

    Example:
        >>> convert_symbol("resnet18-symbol.json", "r.onnx", {"data": (1, 3, 224, 224)})
        ... # doctest: +SKIP
    """
    from portable import nd
    from portable.errors import PortableError
    from portable.gluon.symbol_block import SymbolBlock

    fmt = _checked_format(path, fmt, opset)
    if not inputs:
        raise PortableError(f"{os.fspath(source)}: give the symbol's inputs and their shapes, "
                            f"e.g. --input data:1,3,224,224")
    params = find_params(source) if params is None else params
    inputs = {**inputs, **_loss_labels(os.fspath(source), inputs)}
    block = SymbolBlock.imports(os.fspath(source), list(inputs), params)
    examples = [nd.zeros(shape) for shape in inputs.values()]
    graph, values = block.inference_graph(examples if len(examples) > 1 else examples[0])
    result: dict[str, Any] = {"source": os.fspath(source), "params": os.fspath(params),
                              "path": os.fspath(path), "format": fmt, "nodes": len(graph.nodes)}
    if fmt == "portable":
        import portable
        from portable.predict import deployment

        info = {"source": os.path.basename(os.fspath(source)),
                "producer": f"portable {portable.__version__} export"}
        written = deployment.save(graph, path, values, metadata=info)
        result.update(tensors=written["tensors"], tensor_bytes=written["tensor_bytes"],
                      bytes=written["bytes"])
        return result
    from exporters.onnx import export_model
    from exporters.onnx.exporter import default_opset

    opset = default_opset() if opset is None else opset
    model = export_model(graph, values, path, opset, dynamic_batch=dynamic_batch)
    result.update(opset=opset, tensors=len(model.graph.initializer),
                  tensor_bytes=sum(_onnx_tensor_bytes(t) for t in model.graph.initializer),
                  bytes=os.path.getsize(path))
    return result


# MXNet's loss-output layers: their label is an input of training only.
LOSS_OUTPUTS = ("portable.SoftmaxOutput", "portable.LinearRegressionOutput",
                "portable.LogisticRegressionOutput", "portable.MAERegressionOutput")


def _loss_labels(source: str, inputs: Mapping[str, tuple[int, ...]]) -> dict[str, tuple]:
    """The label variables of a symbol's loss-output layers (a Module checkpoint ends in
    ``SoftmaxOutput``) that ``inputs`` leaves out, with their shapes: they become inputs of the
    inference graph, which never reads them, so the exporter drops them."""
    from portable import sym
    from portable.symbol.nodes import topo_nodes

    symbol = sym.load(source)
    labels = [node.inputs[1][0].name for node in topo_nodes(symbol._entries)
              if node.op in LOSS_OUTPUTS and len(node.inputs) > 1 and node.inputs[1] is not None
              and node.inputs[1][0].is_variable and node.inputs[1][0].name not in inputs]
    if not labels:
        return {}
    shapes = dict(zip(symbol.list_arguments(), symbol.infer_shape(**inputs)[0]))
    return {name: tuple(shapes[name]) for name in labels}


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
