"""Which reader opens a model file: ONNX or portable's deployment format, told by its bytes.

The ONNX reader (``portable.io.onnx``) is imported on first use, so ``import portable.predict``
stays light. It reads files with its own protobuf wire-format decoder, so it runs where the
``onnx`` package cannot be installed.

Example:
    >>> graph = load_graph("runs/lenet.portable")   # doctest: +SKIP
"""
from __future__ import annotations

import os

from portable.errors import SerializationError
from portable.io.files import open_regular
from portable.ir.graph import Graph

# An ONNX ModelProto starts with a field tag: ir_version (field 1, varint: 0x08) in files every
# exporter writes, though protobuf allows any field order.
_ONNX_FIRST_BYTES = frozenset({0x08, 0x12, 0x1a, 0x22, 0x2a, 0x32, 0x3a, 0x40, 0x42})


def sniff(path: str) -> str:
    """``"deployment"`` or ``"onnx"``: the format of the file at ``path``."""
    from portable.predict import deployment

    with open_regular(path, "model") as (handle, _):
        head = handle.read(deployment.SNIFF_BYTES)
    if deployment.is_deployment(head):
        return "deployment"
    if path.endswith(".onnx") or (head and head[0] in _ONNX_FIRST_BYTES):
        return "onnx"
    raise SerializationError(f"{path}: neither an ONNX model nor a portable deployment file "
                             f"(it starts with {head[:16]!r})")


def load_graph(path: str | os.PathLike) -> Graph:
    """The inference graph stored at ``path``; every weight is a constant (initializer) of it.

    Args:
        path: an ONNX file or a deployment file (``portable export --format portable``).

    Returns:
        The graph, in portable's canonical ops; weights of a deployment file (and aligned raw
        tensors of an ONNX file) are read-only views of the memory-mapped file.
    """
    path = os.fspath(path)
    kind = sniff(path)
    if kind == "deployment":
        from portable.predict import deployment

        return deployment.load(path)
    from portable.io.onnx.importer import import_graph  # on first use: keeps the import light

    graph, _ = import_graph(path, params_as_inputs=False)
    return graph
