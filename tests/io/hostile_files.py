"""Builders of the files the hostile-loader tests feed to portable's readers: safetensors bytes,
deployment files, IR graph and symbol documents and ONNX models, each written by hand (the
safetensors layout, JSON text) or with the ``onnx`` package's helper, never with portable's own
writers, so that a test never takes portable's output as its expected value.

Every builder returns a *valid* file by default; the tests then damage one field at a time.
"""
from __future__ import annotations

import copy
import json
import zlib
from typing import Any

import numpy as np

# safetensors dtype codes of the few dtypes the tests store (the format's own names).
CODES = {np.dtype("float32"): "F32", np.dtype("int64"): "I64", np.dtype("uint8"): "U8"}


def safetensors_bytes(header: dict | str | bytes, body: bytes = b"") -> bytes:
    """A safetensors file: 8-byte little-endian header length, the header, the tensor bytes.
    ``header`` is a dict (dumped as JSON), or JSON text / bytes used exactly as given."""
    if isinstance(header, dict):
        header = json.dumps(header)
    raw = header.encode("utf-8", "surrogatepass") if isinstance(header, str) else header
    return len(raw).to_bytes(8, "little") + raw + body


def tensor_layout(tensors: dict[str, np.ndarray]) -> tuple[dict, bytes]:
    """The header entries and body of ``tensors`` laid out back to back, in the given order."""
    entries, body = {}, b""
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        entries[name] = {"dtype": CODES[array.dtype], "shape": list(array.shape),
                         "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    return entries, body


# -- IR graph documents and deployment files ------------------------------------------------------

WEIGHTS = {"w": np.arange(6, dtype=np.float32).reshape(3, 2) / 10}


def graph_doc() -> dict:
    """A valid IR graph document: y = Relu(x @ w + k), k a Constant node with a tensor value."""
    return {
        "format": "portable.graph", "version": 1, "name": "tiny",
        "inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}],
        "outputs": ["y"],
        "initializers": [{"name": "w", "shape": [3, 2], "dtype": "float32"}],
        "nodes": [
            {"op": "MatMul", "name": "mm", "inputs": ["x", "w"], "outputs": ["h"]},
            {"op": "Constant", "name": "k", "inputs": [], "outputs": ["k"],
             "attrs": {"value": {"__tensor__": {"dtype": "float32", "shape": [2],
                                                "data": [0.5, -0.5]}}}},
            {"op": "Add", "name": "add", "inputs": ["h", "k"], "outputs": ["s"]},
            {"op": "Relu", "name": "relu", "inputs": ["s"], "outputs": ["y"]}]}


def deployment_bytes(graph: dict | str | None = None,
                     tensors: dict[str, np.ndarray] | None = None, *,
                     header_edit: Any = None) -> bytes:
    """A deployment file (a safetensors file whose metadata holds the graph and checksums) of
    ``graph`` (a document, or JSON text used as given) and ``tensors``; ``header_edit(header)``
    may change the decoded header before it is written (the checksums stay consistent)."""
    graph = graph_doc() if graph is None else graph
    tensors = dict(WEIGHTS) if tensors is None else tensors
    text = graph if isinstance(graph, str) else json.dumps(graph)
    entries, body = tensor_layout(tensors)
    crcs = {name: zlib.crc32(body[begin:end])
            for name, (begin, end) in ((n, e["data_offsets"]) for n, e in entries.items())}
    meta = {"format": "portable.deployment", "version": "1",
            "crc32": json.dumps(crcs), "metadata": "{}",
            "graph_crc32": str(zlib.crc32(text.encode("utf-8", "surrogatepass"))),
            "graph": text}
    header = {"__metadata__": meta, **entries}
    if header_edit is not None:
        header_edit(header)
    return safetensors_bytes(header, body)


# -- symbol documents -----------------------------------------------------------------------------


def symbol_doc() -> dict:
    """A valid symbol document: softmax(relu(x) + c) + v, c a constant with a tensor value and v
    a variable shaped by a shape hint (one value per channel of x)."""
    return {
        "format": "portable.symbol", "version": 1,
        "nodes": [
            {"op": None, "name": "x", "shape": [2, 3], "dtype": "float32", "attrs": {}},
            {"op": None, "name": "v", "shape": None, "dtype": None, "attrs": {},
             "shape_hint": {"rule": "channels", "source": [0, 0], "params": {"axis": 1}}},
            {"op": "Relu", "name": "relu0", "attrs": {}, "inputs": [[0, 0]], "num_outputs": 1},
            {"op": "Constant", "name": "c", "inputs": [], "num_outputs": 1,
             "attrs": {"value": {"__tensor__": {"dtype": "float32", "shape": [3],
                                                "data": [1.0, 2.0, 3.0]}}}},
            {"op": "Add", "name": "add0", "attrs": {}, "inputs": [[2, 0], [3, 0]],
             "num_outputs": 1},
            {"op": "Softmax", "name": "softmax0", "attrs": {"axis": 1}, "inputs": [[4, 0]],
             "num_outputs": 1},
            {"op": "Add", "name": "add1", "attrs": {}, "inputs": [[5, 0], [1, 0]],
             "num_outputs": 1}],
        "heads": [[6, 0]]}


def edited(doc: dict, path: list, value: Any) -> dict:
    """A deep copy of ``doc`` with the item at ``path`` set to ``value`` (``DELETE`` drops it)."""
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


DELETE = object()


# -- ONNX models (built with the onnx package) ----------------------------------------------------


def onnx_model(**graph_changes: Any):
    """A valid ONNX model built with ``onnx.helper``: y = Softmax(Relu(x @ w + b)), float32.
    ``graph_changes`` replace the lists given to ``make_graph`` (``nodes``, ``inputs``,
    ``outputs``, ``initializers``)."""
    from onnx import TensorProto, helper, numpy_helper

    parts = {
        "nodes": [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                  helper.make_node("Add", ["h", "b"], ["s"], name="add"),
                  helper.make_node("Relu", ["s"], ["r"], name="relu"),
                  helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)],
        "inputs": [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        "outputs": [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        "initializers": [numpy_helper.from_array(WEIGHTS["w"], "w"),
                         numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "b")]}
    parts.update(graph_changes)
    graph = helper.make_graph(parts["nodes"], "tiny", parts["inputs"], parts["outputs"],
                              parts["initializers"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
