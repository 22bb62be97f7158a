r"""portable's deployment format: one file holding an inference graph and its tensors, read with
NumPy and the standard library alone, its weights memory-mapped rather than copied.

The file is a valid safetensors file (``safetensors.numpy.load_file`` reads its tensors):

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
header, maps the file read-only and makes each tensor a read-only ``np.frombuffer`` view of the
mapping: nothing is copied, and pages are read from disk when a kernel first touches them.
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
from portable.io.atomic import atomic_writer
from portable.io.graph_json import graph_from_dict, graph_to_dict
from portable.ir.graph import Graph, TensorType

FORMAT = "portable.deployment"
VERSION = "1"
SUFFIX = ".portable"
# safetensors refuses headers larger than this; so do we, for both reading and writing.
MAX_HEADER_BYTES = 100_000_000
# Files written here show their format tag within this many leading bytes.
SNIFF_BYTES = 64
_METADATA = "__metadata__"

# safetensors dtype names <-> NumPy dtypes (little-endian, as the format stores them).
DTYPES = {"BOOL": np.dtype("bool"), "U8": np.dtype("uint8"), "I8": np.dtype("int8"),
          "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
          "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
          "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8")}
_CODES = {dtype.newbyteorder("="): code for code, dtype in DTYPES.items()}
_CODES_NAMES = sorted(dtype.name for dtype in _CODES)


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
    tensors = {name: _little_endian(name, array) for name, array in graph.initializers.items()}
    if _METADATA in tensors:
        raise SerializationError(f"{path}: a tensor may not be named {_METADATA!r}")
    order = sorted(tensors, key=lambda name: (-tensors[name].dtype.itemsize, name))
    entries, offset = {}, 0
    for name in order:
        array = tensors[name]
        entries[name] = {"dtype": _CODES[array.dtype.newbyteorder("=")],
                         "shape": list(array.shape),
                         "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    crcs = {name: zlib.crc32(_bytes_of(tensors[name])) for name in order}
    graph_text = json.dumps(graph_to_dict(graph), separators=(",", ":"))
    try:
        user = json.dumps(dict(metadata or {}), separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{path}: the metadata is not JSON-able: {exc}") from exc
    meta = {"format": FORMAT, "version": VERSION,
            "crc32": json.dumps(crcs, separators=(",", ":")),
            "metadata": user,
            "graph_crc32": str(zlib.crc32(graph_text.encode("utf-8"))),
            "graph": graph_text}
    header = json.dumps({_METADATA: meta, **entries}, separators=(",", ":"),
                        allow_nan=False).encode("utf-8")
    header += b" " * (-len(header) % 8)
    if len(header) > MAX_HEADER_BYTES:
        raise SerializationError(f"{path}: the header would take {len(header)} bytes, more than "
                                 f"the {MAX_HEADER_BYTES} safetensors allows (large attribute "
                                 f"tensors belong in initializers)")
    with atomic_writer(path) as handle:  # streamed: the model is never copied in memory
        handle.write(len(header).to_bytes(8, "little"))
        handle.write(header)
        for name in order:
            handle.write(_bytes_of(tensors[name]))
    return {"path": os.fspath(path), "tensors": len(order), "tensor_bytes": offset,
            "bytes": 8 + len(header) + offset}


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


def _little_endian(name: str, array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype.newbyteorder("=") not in _CODES:
        raise SerializationError(f"tensor {name!r} has dtype {array.dtype}, which the deployment "
                                 f"format cannot store (it stores {', '.join(_CODES_NAMES)})")
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder != "|" else array.dtype
    return np.require(array.astype(little, copy=False), requirements="C")  # keeps 0-d as 0-d


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The array's bytes as a flat uint8 view (no copy; works for 0-d and bool arrays)."""
    return array.reshape(-1).view(np.uint8)


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
    if len(first_bytes) < 10:
        return False
    length = int.from_bytes(first_bytes[:8], "little")
    return 2 <= length <= MAX_HEADER_BYTES and first_bytes[8:9] == b"{" and \
        first_bytes[9:10] in (b'"', b"}", b" ", b"\n")


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
    header, meta, mapping, start = _open(source)
    arrays = _tensors(header, mapping, start, source)
    if verify:
        _check_crcs(meta, arrays, mapping, start, header, source)
        actual = zlib.crc32(meta["graph"].encode("utf-8"))
        if str(actual) != meta.get("graph_crc32"):
            raise SerializationError(f"{source}: the graph is corrupted: its crc32 is "
                                     f"{actual}, the file records "
                                     f"{str(meta.get('graph_crc32'))[:20]}")
    doc = _json(meta["graph"], source, "the graph")
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
    header, meta, mapping, start = _open(source)
    arrays = _tensors(header, mapping, start, source)
    doc = _json(meta["graph"], source, "the graph")
    if not isinstance(doc, dict):
        raise SerializationError(f"{source}: the graph is not a JSON object")
    return {"path": source, "format": FORMAT, "version": meta["version"],
            "bytes": os.path.getsize(source), "header_bytes": start - 8,
            "tensors": len(arrays), "tensor_bytes": sum(int(a.nbytes) for a in arrays.values()),
            "graph": doc.get("name"), "nodes": len(doc.get("nodes") or ()),
            "inputs": [r.get("name") for r in doc.get("inputs") or () if isinstance(r, dict)],
            "outputs": list(doc.get("outputs") or ()),
            "metadata": _json(meta.get("metadata", "{}"), source, "the metadata")}


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory-mapped file (as ``load``'s tensors are)."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return False


def _open(source: str) -> tuple[dict, dict, Any, int]:
    """Header (tensor entries), metadata, the read-only mapping of the file (None when it has
    no tensor bytes) and where the tensor bytes start."""
    try:
        with open(source, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 10:
                raise SerializationError(f"{source}: too short to be a deployment file "
                                         f"({size} bytes)")
            length = int.from_bytes(handle.read(8), "little")
            if length < 2 or length > MAX_HEADER_BYTES:
                raise SerializationError(f"{source}: not a deployment file: its header length "
                                         f"{length} is absurd")
            if length > size - 8:
                raise SerializationError(f"{source}: truncated: the header needs {length} bytes "
                                         f"but the file has {size - 8} after the length")
            raw = handle.read(length)
            start = 8 + length
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) \
                if size > start else None
    except OSError as exc:
        raise SerializationError(f"cannot read deployment file {source}: {exc}") from exc
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SerializationError(f"{source}: the header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise SerializationError(f"{source}: the header is not a JSON object")
    meta = header.pop(_METADATA, None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SerializationError(
            f"{source}: not a portable deployment file (a safetensors file whose "
            f"\"__metadata__\" lacks \"format\": \"{FORMAT}\"); write one with `portable export "
            f"MODEL.onnx -o MODEL{SUFFIX}`")
    if meta.get("version") != VERSION:
        raise SerializationError(f"{source}: deployment format version {meta.get('version')!r} "
                                 f"is not supported (this portable reads version {VERSION})")
    for key in ("graph", "crc32"):
        if not isinstance(meta.get(key), str):
            raise SerializationError(f"{source}: the metadata lacks \"{key}\" (a JSON string)")
    return header, meta, mapping, start


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice")
        result[key] = value
    return result


def _json(text: Any, source: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{source}: {what} is not valid JSON: {exc}") from exc


def _tensors(header: dict, mapping: Any, start: int, source: str) -> dict[str, np.ndarray]:
    """Check every tensor entry and make the read-only views (in file order)."""
    available = 0 if mapping is None else len(mapping) - start
    spans = []
    for name, entry in header.items():
        where = f"{source}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise SerializationError(f"{where}: its entry is not a JSON object")
        dtype = DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise SerializationError(f"{where}: unknown dtype {entry.get('dtype')!r} (this "
                                     f"portable reads {', '.join(DTYPES)})")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not isinstance(shape, list) or not all(_count(d) for d in shape):
            raise SerializationError(f"{where}: shape {shape!r:.60} is not a list of "
                                     f"non-negative ints")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_count, offsets)):
            raise SerializationError(f"{where}: data_offsets {offsets!r:.60} is not a pair of "
                                     f"non-negative ints")
        begin, end = offsets
        if not begin <= end <= available:
            raise SerializationError(f"{where}: data_offsets [{begin}, {end}] lie outside the "
                                     f"{available} bytes of tensor data (truncated file?)")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes != end - begin:
            raise SerializationError(f"{where}: shape {shape} of {entry['dtype']} needs {nbytes} "
                                     f"bytes but data_offsets [{begin}, {end}] hold "
                                     f"{end - begin}")
        spans.append((begin, end, name, dtype, tuple(shape)))
    spans.sort()
    arrays = {}
    for i, (begin, end, name, dtype, shape) in enumerate(spans):
        if i and begin < spans[i - 1][1]:
            raise SerializationError(f"{source}: tensors {spans[i - 1][2]!r} and {name!r} "
                                     f"overlap (bytes {begin} to {spans[i - 1][1]})")
        if end == begin:
            array = np.empty(shape, dtype)
            array.setflags(write=False)
        else:
            array = np.frombuffer(mapping, dtype, (end - begin) // dtype.itemsize,
                                  start + begin).reshape(shape)
        arrays[name] = array
    return arrays


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_crcs(meta: dict, arrays: Mapping[str, np.ndarray], mapping: Any, start: int,
                header: dict, source: str) -> None:
    crcs = _json(meta["crc32"], source, "the crc32 table")
    if not isinstance(crcs, dict):
        raise SerializationError(f"{source}: the crc32 table is not a JSON object")
    for name in arrays:
        if name not in crcs:
            raise SerializationError(f"{source}: tensor {name!r} has no crc32")
        begin, end = header[name]["data_offsets"]
        actual = zlib.crc32(memoryview(mapping)[start + begin:start + end]) if end > begin \
            else 0
        recorded = crcs[name]
        if actual != recorded:
            shown = f"{recorded:08x}" if _count(recorded) else repr(recorded)[:20]
            raise SerializationError(f"{source}: tensor {name!r} is corrupted: its crc32 is "
                                     f"{actual:08x}, the file records {shown} (bytes "
                                     f"{start + begin} to {start + end} of the file)")
