"""A reader of the protobuf wire format of ONNX files, for the fields portable imports, so
that a model loads where neither ``onnx`` nor ``protobuf`` can be installed (a phone).

Protobuf in brief: a message is a run of ``(tag, value)`` pairs, ``tag = field << 3 |
wire_type``; wire type 0 is a varint, 1 eight little-endian bytes, 2 a length-prefixed run of
bytes (a string, bytes, a sub-message or a packed run of numbers), 5 four bytes. Fields may
come in any order and repeat; a repeated number may be packed (wire type 2) or not. Unknown
fields are skipped, as protobuf does, so files written by newer exporters still read.

Each message is described by a table ``field number -> (attribute, kind)``; one function,
``_parse``, reads any of them. The tensor bytes (``raw_data``) are never copied: they stay
``memoryview`` slices of the memory-mapped file until ``reading.tensor_to_array`` views them.

Example:
    >>> model, source = load_model("lenet.onnx")   # doctest: +SKIP
    >>> [node.op_type for node in model.graph.node][:2]   # doctest: +SKIP
    ['Conv', 'Relu']
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from portable.errors import SerializationError
from portable.io.files import map_bytes, resolve_inside

# Kinds of fields; a message class stands for a sub-message. "repeated" wraps any kind.
INT64, INT32, UINT64, STRING, BYTES, FLOAT, DOUBLE = (
    "int64", "int32", "uint64", "string", "bytes", "float", "double")
_NUMBERS = {INT64: np.int64, INT32: np.int32, UINT64: np.uint64, FLOAT: np.dtype("<f4"),
            DOUBLE: np.dtype("<f8")}
_VARINTS = (INT64, INT32, UINT64)
_MASK64 = (1 << 64) - 1


class Malformed(ValueError):
    """The bytes do not follow the wire format (raised inside; reported as
    SerializationError naming the file)."""


class Message:
    """Base of the message classes: scalars default to 0 / "", sub-messages to None and
    repeated fields to empty lists, as protobuf reads absent fields."""

    FIELDS: dict[int, tuple[str, Any, bool]] = {}

    def __init__(self) -> None:
        for name, kind, repeated in self.FIELDS.values():
            default: Any = [] if repeated else (
                0 if kind in _VARINTS else 0.0 if kind in (FLOAT, DOUBLE) else
                "" if kind == STRING else None)
            setattr(self, name, default)

    def __repr__(self) -> str:
        shown = {name: getattr(self, name) for name, _, _ in self.FIELDS.values()
                 if getattr(self, name) not in (None, "", 0, [])}
        return f"{type(self).__name__}({shown})"


def _fields(table: dict[str, tuple[int, Any]], repeated: tuple[str, ...] = ()
            ) -> dict[int, tuple[str, Any, bool]]:
    return {number: (name, kind, name in repeated) for name, (number, kind) in table.items()}


class StringEntry(Message):
    FIELDS = _fields({"key": (1, STRING), "value": (2, STRING)})


class Dimension(Message):
    # dim_value defaults to None (not 0) so that "unset" and "0" stay apart, like HasField
    FIELDS = _fields({"dim_value": (1, INT64), "dim_param": (2, STRING)})

    def __init__(self) -> None:
        super().__init__()
        self.dim_value = None


class Shape(Message):
    FIELDS = _fields({"dim": (1, Dimension)}, ("dim",))


class TensorTypeProto(Message):
    FIELDS = _fields({"elem_type": (1, INT32), "shape": (2, Shape)})


class TypeProto(Message):
    """Tensor, sequence and optional types are read; ``kind`` names the type a value has
    (``tensor_type``, ``sequence_type``...; "" when none is set)."""

    FIELDS = _fields({"tensor_type": (1, TensorTypeProto)})
    KINDS = {1: "tensor_type", 4: "sequence_type", 5: "map_type", 7: "opaque_type",
             8: "sparse_tensor_type", 9: "optional_type"}

    def __init__(self) -> None:
        super().__init__()
        self.kind = ""


class SequenceTypeProto(Message):
    FIELDS: dict = {}  # elem_type: a TypeProto, filled in below (the two refer to each other)


class OptionalTypeProto(Message):
    FIELDS: dict = {}


# Sequence and optional types nest TypeProtos (seq(tensor), optional(seq(tensor))); depth is
# bounded by ``parse_model`` (Python's stack) and by ``reading.value_type``.
TypeProto.FIELDS.update(_fields({"sequence_type": (4, SequenceTypeProto),
                                 "optional_type": (9, OptionalTypeProto)}))
SequenceTypeProto.FIELDS.update(_fields({"elem_type": (1, TypeProto)}))
OptionalTypeProto.FIELDS.update(_fields({"elem_type": (1, TypeProto)}))


class ValueInfo(Message):
    FIELDS = _fields({"name": (1, STRING), "type": (2, TypeProto)})


class Tensor(Message):
    FIELDS = _fields({
        "dims": (1, INT64), "data_type": (2, INT32), "float_data": (4, FLOAT),
        "int32_data": (5, INT32), "string_data": (6, BYTES), "int64_data": (7, INT64),
        "name": (8, STRING), "raw_data": (9, BYTES), "double_data": (10, DOUBLE),
        "uint64_data": (11, UINT64), "external_data": (13, StringEntry),
        "data_location": (14, INT32)},
        ("dims", "float_data", "int32_data", "string_data", "int64_data", "double_data",
         "uint64_data", "external_data"))
    EXTERNAL = 1  # data_location: the bytes are in another file


class SparseTensor(Message):
    FIELDS = _fields({"values": (1, Tensor)})


class Attribute(Message):
    FIELDS = _fields({
        "name": (1, STRING), "f": (2, FLOAT), "i": (3, INT64), "s": (4, BYTES),
        "t": (5, Tensor), "floats": (7, FLOAT), "ints": (8, INT64), "strings": (9, BYTES),
        "type": (20, INT32), "ref_attr_name": (21, STRING)}, ("floats", "ints", "strings"))


class Node(Message):
    """A node; ``span`` is where its bytes lie in the file (to hand one node to onnx)."""

    FIELDS = _fields({
        "input": (1, STRING), "output": (2, STRING), "name": (3, STRING),
        "op_type": (4, STRING), "attribute": (5, Attribute), "domain": (7, STRING)},
        ("input", "output", "attribute"))

    def __init__(self) -> None:
        super().__init__()
        self.span: memoryview | None = None


class Graph(Message):
    FIELDS = _fields({
        "node": (1, Node), "name": (2, STRING), "initializer": (5, Tensor),
        "input": (11, ValueInfo), "output": (12, ValueInfo),
        "sparse_initializer": (15, SparseTensor)},
        ("node", "initializer", "input", "output", "sparse_initializer"))


# A graph-valued attribute (If's branches, Loop's and Scan's body) holds a Graph, declared
# after Attribute: the fields are added here. Nesting depth is bounded by ``parse_model``.
Attribute.FIELDS.update(_fields({"g": (6, Graph), "graphs": (11, Graph)}, ("graphs",)))
# A TYPE_PROTO attribute (Optional's ``type``).
Attribute.FIELDS.update(_fields({"tp": (14, TypeProto)}))


class OpsetId(Message):
    FIELDS = _fields({"domain": (1, STRING), "version": (2, INT64)})


class Model(Message):
    FIELDS = _fields({
        "ir_version": (1, INT64), "producer_name": (2, STRING), "graph": (7, Graph),
        "opset_import": (8, OpsetId), "metadata_props": (14, StringEntry)},
        ("opset_import", "metadata_props"))


# -- the decoder ---------------------------------------------------------------------------------


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise Malformed("a varint runs past the end of its message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, pos  # (bits past 64 are dropped, as protobuf drops them)
        shift += 7
        if shift > 63:
            raise Malformed("a varint is longer than 10 bytes")


def _signed(value: int, kind: str) -> int:
    """Two's complement: negative int32/int64 values are written as 64-bit varints; an int32
    keeps its low 32 bits, as protobuf reads it (so it always fits the field's type)."""
    if kind == INT32:
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value
    if kind != UINT64 and value >= 1 << 63:
        value -= 1 << 64
    return value


def _packed_varints(buf: memoryview, start: int, end: int, kind: str) -> np.ndarray:
    """A packed run of varints, decoded with NumPy (int64 weights can be large)."""
    data = np.frombuffer(buf[start:end], np.uint8)
    if not data.size:
        return np.zeros(0, _NUMBERS[kind])
    if data[-1] & 0x80:
        raise Malformed("a packed varint runs past the end of its field")
    last = np.flatnonzero(data < 0x80)
    first = np.concatenate(([0], last[:-1] + 1))
    lengths = last - first + 1
    if lengths.max() > 10:
        raise Malformed("a varint is longer than 10 bytes")
    group_start = np.repeat(first, lengths)
    shift = (7 * (np.arange(data.size) - group_start)).astype(np.uint64)
    parts = (data & 0x7F).astype(np.uint64) << shift
    values = np.bitwise_or.reduceat(parts, first)
    return values if kind == UINT64 else values.view(np.int64).astype(_NUMBERS[kind])


def _text(buf: memoryview, start: int, end: int, what: str) -> str:
    try:
        return bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"{what} is not valid UTF-8 text: {bytes(buf[start:end])[:40]!r}"
                        ) from exc


def _parse(cls: type[Message], buf: memoryview, pos: int, end: int) -> Message:
    """Read one message of class ``cls`` from ``buf[pos:end]``."""
    message = cls()
    chunks: dict[str, list] = {}
    fields = cls.FIELDS
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1:
            value, pos = pos, pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            value, pos = (pos, pos + length), pos + length
        elif wire == 5:
            value, pos = pos, pos + 4
        else:
            raise Malformed(f"field {number} of a {cls.__name__} has wire type {wire}, which "
                            f"ONNX files never use")
        if pos > end:
            raise Malformed(f"field {number} of a {cls.__name__} runs past the end of its "
                            f"message")
        if cls is TypeProto and number in TypeProto.KINDS:
            message.kind = TypeProto.KINDS[number]
        spec = fields.get(number)
        if spec is None:
            continue  # a field portable does not read
        name, kind, repeated = spec
        if wire == 2 and kind in _NUMBERS and not repeated:
            raise Malformed(f"{cls.__name__}.{name} holds one number, but is written as a "
                            f"packed run (wire type 2)")
        item = _value(kind, wire, value, buf, f"{cls.__name__}.{name}")
        if repeated:
            chunks.setdefault(name, []).append(item)
        else:
            setattr(message, name, item)
    for name, parts in chunks.items():
        kind = next(k for n, k, _ in fields.values() if n == name)
        if kind in _NUMBERS:
            arrays = [np.atleast_1d(np.asarray(p, _NUMBERS[kind])) for p in parts]
            setattr(message, name, np.concatenate(arrays) if len(arrays) > 1 else arrays[0])
        else:
            setattr(message, name, parts)
    return message


def _value(kind: Any, wire: int, value: Any, buf: memoryview, what: str) -> Any:
    """One field's value as the table's kind asks; a packed run returns an array."""
    if kind in _VARINTS:
        if wire == 2:
            return _packed_varints(buf, value[0], value[1], kind)
        if wire != 0:
            raise Malformed(f"{what} should be a varint, found wire type {wire}")
        return _signed(value, kind)
    if kind in (FLOAT, DOUBLE):
        size = 4 if kind == FLOAT else 8
        if wire == 2:
            start, stop = value
            if (stop - start) % size:
                raise Malformed(f"{what}: a packed run of {stop - start} bytes is not a whole "
                                f"number of {kind}s")
            return np.frombuffer(buf[start:stop], _NUMBERS[kind])
        if wire != (5 if kind == FLOAT else 1):
            raise Malformed(f"{what} should be a {kind}, found wire type {wire}")
        return float(np.frombuffer(buf[value:value + size], _NUMBERS[kind])[0])
    if wire != 2:
        raise Malformed(f"{what} should be length-delimited, found wire type {wire}")
    start, stop = value
    if kind == STRING:
        return _text(buf, start, stop, what)
    if kind == BYTES:
        return buf[start:stop]
    message = _parse(kind, buf, start, stop)
    if kind is Node:
        message.span = buf[start:stop]
    return message


def parse_model(data: Any, source: str = "<bytes>") -> Model:
    """The Model in ``data`` (bytes, a memoryview or an mmap). Raises SerializationError
    naming ``source`` when the bytes are not an ONNX model."""
    buf = memoryview(data)
    try:
        model = _parse(Model, buf, 0, len(buf))
    except RecursionError:  # sub-messages nested past Python's stack (hostile subgraphs)
        raise SerializationError(f"{source}: not a valid ONNX model: its messages (subgraphs) "
                                 f"are nested too deeply to read") from None
    except Malformed as exc:
        raise SerializationError(f"{source}: not a valid ONNX model (truncated or corrupted "
                                 f"protobuf, {len(buf)} bytes): {exc}") from exc
    if model.graph is None:
        raise SerializationError(f"{source}: not an ONNX model: it holds no graph "
                                 f"({len(buf)} bytes)")
    return model


def load_model(model: Any, base_dir: str | None = None) -> tuple[Model, str]:
    """Read ``model``: a path (memory-mapped), serialized bytes, or any object with
    ``SerializeToString`` (an ``onnx.ModelProto``); tensors kept in external data files
    (``base_dir``, default the model's folder) become views of those files, mapped too.

    Returns:
        The Model and a label naming its source, for messages.
    """
    if isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        parsed = parse_model(map_bytes(source, "ONNX model"), source)
        base_dir = os.path.dirname(os.path.abspath(source)) if base_dir is None else base_dir
    elif isinstance(model, (bytes, bytearray, memoryview)):
        source = "<bytes>"
        parsed = parse_model(bytes(model), source)
    elif hasattr(model, "SerializeToString"):
        graph = getattr(model, "graph", None)
        source = f"model {getattr(graph, 'name', '') or '<unnamed>'!r}"
        parsed = parse_model(model.SerializeToString(), source)
    else:
        raise SerializationError(f"cannot import {type(model).__name__}: give a path, bytes or "
                                 f"an onnx.ModelProto")
    _resolve_external(parsed, base_dir, source)
    return parsed, source


def _tensors(model: Model) -> list[Tensor]:
    """Every tensor of the model: initializers and tensor attributes, in subgraphs too."""
    found, graphs = [], [model.graph]
    while graphs:
        graph = graphs.pop()
        found += list(graph.initializer)
        for node in graph.node:
            found += [attr.t for attr in node.attribute if attr.t is not None]
            graphs += [attr.g for attr in node.attribute if attr.g is not None]
            graphs += [g for attr in node.attribute for g in attr.graphs]
    return found


def _resolve_external(model: Model, base_dir: str | None, source: str) -> None:
    """Point every external tensor's ``raw_data`` at its bytes in the (mapped) data file."""
    external = [t for t in _tensors(model) if t.data_location == Tensor.EXTERNAL]
    if not external:
        return
    if base_dir is None:
        raise SerializationError(f"{source}: the model keeps tensors in external data files; "
                                 f"give base_dir= (the folder holding them)")
    files: dict[str, memoryview] = {}
    for tensor in external:
        entries = {e.key: e.value for e in tensor.external_data}
        where = f"{source}: tensor {tensor.name!r}"
        path = resolve_inside(base_dir, entries.get("location", ""),
                              f"{where}: external data location")
        if path not in files:
            files[path] = map_bytes(path, "external data file")
        data = files[path]
        try:
            offset = int(entries.get("offset", 0))
            length = int(entries["length"]) if "length" in entries else len(data) - offset
        except ValueError as exc:
            raise SerializationError(f"{where}: bad external data offset/length: {exc}") from exc
        if offset < 0 or length < 0 or offset + length > len(data):
            raise SerializationError(f"{where}: external data [{offset}, {offset + length}) "
                                     f"lies outside {path} ({len(data)} bytes)")
        tensor.raw_data = data[offset:offset + length]
        tensor.data_location = 0
