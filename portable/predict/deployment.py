r"""portable's deployment format: one file holding an inference graph and its tensors, read with
NumPy and the standard library alone, its weights memory-mapped rather than copied.

The file is a valid safetensors file (``safetensors.numpy.load_file`` reads its tensors),
written and read by ``portable.io.tensors``; this module adds the graph and the checksums:

    8 bytes       N, the header length (unsigned little-endian)
    N bytes       the header, JSON, padded with spaces so that the tensor bytes start 8-aligned:
                  {"__metadata__": {"format": "portable.deployment", "version": "1",
                                    "crc32": "{\"w\": 1234, ...}",        # one per tensor
                                    "metadata": "{...}",                  # the caller's, JSON
                                    "graph_crc32": "5678",
                                    "graph": "{...}"},                    # portable/io/graph_json
                   "w": {"dtype": "F32", "shape": [10, 84], "data_offsets": [0, 3360]}, ...}
    the rest      the tensors' bytes, little-endian, back to back, larger items first so every
                  tensor is aligned to its item size (as safetensors' own writer orders them)

Every initializer of the graph (weights, folded constants) is one tensor. ``load`` parses the
header, maps the file read-only and makes each tensor a read-only view of the mapping: nothing
is copied, and pages are read from disk when a kernel first touches them.
Loading checks everything it reads and refuses a damaged file with a SerializationError naming
the file (and the tensor or node at fault); it never writes to the file.

Example:
    >>> save(graph, "lenet.portable", params)        # doctest: +SKIP
    >>> graph = load("lenet.portable")               # doctest: +SKIP
"""
from __future__ import annotations

import json
import mmap
import os
import zlib
from typing import Any, Mapping

import numpy as np

from portable.errors import BindError, SerializationError
from portable.io.graph_json import FORMAT as GRAPH_FORMAT
from portable.io.graph_json import VERSION as GRAPH_VERSION
from portable.io.graph_json import graph_from_dict, graph_to_dict
from portable.io.json_records import RecordReader, check_written, parse_json
from portable.io.tensors import (METADATA_KEY, NUMERIC_KINDS, TensorFile, looks_like_tensor_file,
                                 raw_bytes, read_tensor_file, storable, write_tensor_file)
from portable.ir.graph import Graph, TensorType

FORMAT = "portable.deployment"
VERSION = "1"
SUFFIX = ".portable"
# Files written here show their format tag within this many leading bytes.
SNIFF_BYTES = 64


def save(graph: Graph, path: str | os.PathLike, params: Mapping[str, Any] | None = None,
         metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``graph`` (with ``params`` folded in as initializers) as a deployment file.

    Args:
        graph: the inference graph.
        path: the file to write (atomically); ``.portable`` is the usual suffix.
        params: values of graph inputs that are parameters (NumPy arrays or NDArrays); each
            stops being an input and becomes an initializer.
        metadata: anything JSON can hold, kept in the file (``describe`` returns it).

    Returns:
        ``{"path", "tensors", "tensor_bytes", "bytes"}`` of the file written.

    Raises:
        BindError: a param is not a graph input or does not match its declared type.
        SerializationError: a tensor has a dtype the format cannot store, or an attribute a
            value JSON cannot hold.

    Example:
        >>> save(graph, "model.portable", {"fc.weight": w})    # doctest: +SKIP
        {'path': 'model.portable', 'tensors': 7, 'tensor_bytes': 174248, 'bytes': 179120}
    """
    graph = _fold_params(graph, params or {})
    # The graph types its initializers as numbers (graph_json), so complex ones are refused.
    tensors = {name: storable(name, array, kinds=NUMERIC_KINDS, source=os.fspath(path))
               for name, array in graph.initializers.items()}
    crcs = {name: zlib.crc32(raw_bytes(array)) for name, array in tensors.items()}
    graph_text = json.dumps(graph_to_dict(graph), separators=(",", ":"))
    check_written(graph_text, f"the graph of {os.fspath(path)}")  # names load would refuse
    try:
        user = json.dumps(dict(metadata or {}), separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{path}: the metadata is not JSON-able: {exc}") from exc
    meta = {"format": FORMAT, "version": VERSION,
            "crc32": json.dumps(crcs, separators=(",", ":")),
            "metadata": user,
            "graph_crc32": str(zlib.crc32(graph_text.encode("utf-8"))),
            "graph": graph_text}
    return write_tensor_file(path, tensors, meta, kinds=NUMERIC_KINDS)


def _fold_params(graph: Graph, params: Mapping[str, Any]) -> Graph:
    if not params:
        return graph
    declared = graph.input_types
    arrays = {}
    for name, value in params.items():
        array = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
        if name not in declared:
            raise BindError(f"graph {graph.name!r}: parameter {name!r} is not a graph input "
                            f"(inputs: {list(declared)[:8]})")
        want = declared[name]
        if array.dtype != want.dtype or array.ndim != want.rank or any(
                d is not None and d != s for d, s in zip(want.shape, array.shape)):
            raise BindError(f"graph {graph.name!r}: parameter {name!r} is "
                            f"{TensorType(array.shape, array.dtype)!r}; the graph declares "
                            f"{want!r}")
        arrays[name] = array
    inputs = tuple((name, type_) for name, type_ in graph.inputs if name not in arrays)
    return graph.replace(inputs=inputs, initializers={**graph.initializers, **arrays})


def is_deployment(first_bytes: bytes) -> bool:
    """Whether a file starting with ``first_bytes`` is for ``load`` to read: a safetensors file
    (a plausible header length, then a JSON object). A safetensors file of another origin is
    claimed too, so that ``load`` can say what it lacks instead of another reader failing on it.

    Args:
        first_bytes: the file's first bytes (at least 10; ``SNIFF_BYTES`` is plenty).

    Example:
        >>> is_deployment(b"\\x08\\x07\\x12\\x07pytorch")   # an ONNX model's first bytes
        False
    """
    return looks_like_tensor_file(first_bytes)


def load(path: str | os.PathLike, *, verify: bool = True) -> Graph:
    """Read a deployment file; its tensors become read-only views of the mapped file.

    Args:
        path: the file ``save`` wrote.
        verify: check each tensor's crc32 (reads every byte once; the pages stay cached).

    Returns:
        The graph, its initializers memory-mapped.

    Raises:
        SerializationError: the file is truncated, corrupted, of another format or version;
            the message names the file and the tensor or node at fault.

    Example:
        >>> graph = load("lenet.portable")                    # doctest: +SKIP
        >>> graph.initializers["fc.weight"].flags.writeable   # doctest: +SKIP
        False
    """
    source = os.fspath(path)
    found, meta = _open(source)
    arrays = found.tensors
    if verify:
        _check_crcs(meta, found, source)
        actual = zlib.crc32(meta["graph"].encode("utf-8"))
        if str(actual) != meta.get("graph_crc32"):
            raise SerializationError(f"{source}: the graph is corrupted: its crc32 is "
                                     f"{actual}, the file records "
                                     f"{str(meta.get('graph_crc32'))[:20]}")
    doc = parse_json(meta["graph"], source, "the graph")
    return graph_from_dict(doc, arrays, source=source)


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """What a deployment file holds, from its header alone (no tensor is read or checked).

    Returns:
        ``{"path", "format", "version", "bytes", "header_bytes", "tensors", "tensor_bytes",
        "graph", "nodes", "inputs", "outputs", "metadata"}``.

    Example:
        >>> describe("lenet.portable")["tensors"]             # doctest: +SKIP
        8
    """
    source = os.fspath(path)
    found, meta = _open(source)
    arrays = found.tensors
    # The fields shown are checked as load checks them, so a damaged graph is named here too.
    reader = RecordReader(source)
    doc = reader.check_document(parse_json(meta["graph"], source, "the graph"), GRAPH_FORMAT,
                                GRAPH_VERSION, "graph")
    inputs = [reader.string(reader.object(record, f"inputs[{i}]"), "name", f"inputs[{i}]")
              for i, record in enumerate(reader.items(doc, "inputs"))]
    return {"path": source, "format": FORMAT, "version": meta["version"],
            "bytes": found.size, "header_bytes": found.header_bytes,
            "tensors": len(arrays), "tensor_bytes": sum(int(a.nbytes) for a in arrays.values()),
            "graph": reader.string(doc, "name", "graph"),
            "nodes": len(reader.items(doc, "nodes")), "inputs": inputs,
            "outputs": list(reader.string_list(doc, "outputs", "graph")),
            "metadata": parse_json(meta.get("metadata", "{}"), source, "the metadata")}


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory-mapped file (as ``load``'s tensors are)."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return False


def _open(source: str) -> tuple[TensorFile, dict]:
    """The file's tensors (read-only views of its mapping) and its checked metadata."""
    found = read_tensor_file(source, what="deployment file")
    meta = found.metadata
    if meta.get("format") != FORMAT:
        raise SerializationError(
            f"{source}: not a portable deployment file (a safetensors file whose "
            f"\"{METADATA_KEY}\" lacks \"format\": \"{FORMAT}\"); write one with `portable "
            f"export MODEL.onnx -o MODEL{SUFFIX}`")
    if meta.get("version") != VERSION:
        raise SerializationError(f"{source}: deployment format version {meta.get('version')!r} "
                                 f"is not supported (this portable reads version {VERSION})")
    for key in ("graph", "crc32"):
        if key not in meta:
            raise SerializationError(f"{source}: the metadata lacks \"{key}\" (a JSON string)")
    return found, meta


def _check_crcs(meta: dict, found: TensorFile, source: str) -> None:
    crcs = parse_json(meta["crc32"], source, "the crc32 table")
    if not isinstance(crcs, dict):
        raise SerializationError(f"{source}: the crc32 table is not a JSON object")
    for name, array in found.tensors.items():
        if name not in crcs:
            raise SerializationError(f"{source}: tensor {name!r} has no crc32")
        actual = zlib.crc32(raw_bytes(array))  # reads the mapped pages, copies nothing
        recorded = crcs[name]
        if actual != recorded:
            shown = f"{recorded:08x}" if isinstance(recorded, int) and recorded >= 0 \
                else repr(recorded)[:20]
            begin, end = found.spans[name]
            raise SerializationError(f"{source}: tensor {name!r} is corrupted: its crc32 is "
                                     f"{actual:08x}, the file records {shown} (bytes "
                                     f"{begin} to {end} of the file)")
