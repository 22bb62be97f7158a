"""Wire-format ONNX messages (``wire.py``) -> portable values: tensors, value types and
attributes, with the same meaning as ``onnx.numpy_helper`` and ``onnx.helper`` give them.

Every failure becomes one of portable's exceptions naming what was being read (the tensor,
attribute or value), so a corrupted model never escapes as a NumPy error.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

# A tensor or value with more than MAX_ELEMENTS elements (2^40 - 1: 2^40 floats are 4 TiB), or a dim of
# MAX_DIM or more, is refused as absurd: portable.dtypes holds the limits every loader shares.
from portable.dtypes import MAX_DIM, MAX_ELEMENTS  # noqa: F401  (re-exported)
from portable.dtypes import (LOW_PRECISION, ONNX_DTYPES, PACKED_BITS, from_onnx, unpack_bits,
                             low_precision_missing, shape_problem)
from portable.errors import OpAttributeError, SerializationError, ShapeError
from portable.io.onnx.schemas import ATTRIBUTE_KINDS
from portable.io.onnx.wire import Attribute, Tensor, ValueInfo
from portable.ir.graph import TensorType
from portable.ir.types import OptionalType, SequenceType, ValueType


DTYPE_NAMES = dict(enumerate((
    "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
    "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
    "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2")))
ATTRIBUTE_TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "INT", 3: "STRING", 4: "TENSOR",
                        5: "GRAPH", 6: "FLOATS", 7: "INTS", 8: "STRINGS", 9: "TENSORS",
                        10: "GRAPHS", 11: "SPARSE_TENSOR", 12: "SPARSE_TENSORS",
                        13: "TYPE_PROTO", 14: "TYPE_PROTOS"}

# element type -> the typed field holding its values when raw_data is absent
_TYPED_FIELD = {1: "float_data", 11: "double_data", 7: "int64_data", 12: "uint64_data",
                13: "uint64_data", 2: "int32_data", 3: "int32_data", 4: "int32_data",
                5: "int32_data", 6: "int32_data", 9: "int32_data", 10: "int32_data",
                **{code: "int32_data" for code in LOW_PRECISION}}
FLOAT16 = 10


def dtype_name(code: int) -> str:
    """The ONNX name of an element type code (``FLOAT``, ``BFLOAT16``, ...)."""
    return DTYPE_NAMES.get(int(code), f"#{code}")


def checked_dims(dims: Any, where: str) -> tuple[int, ...]:
    """A tensor's dimensions as Python ints, refused (ShapeError) unless each is in
    ``[0, MAX_DIM)`` and they hold at most ``MAX_ELEMENTS`` elements (2^40 - 1: 2^40 itself is refused;
    zero dims do not hide the others, which NumPy would refuse). Checked before any allocation.
    """
    dims = tuple(int(d) for d in dims)  # (int64 from the wire: Python ints from here on)
    problem = shape_problem(dims)
    if problem is not None:
        raise ShapeError(f"{where}: shape {list(dims)[:8]} {problem}")
    return dims


def tensor_to_array(tensor: Tensor, where: str) -> np.ndarray:
    """A read-only NumPy array of a tensor; raw bytes are viewed, not copied (an array at an
    odd offset of the file is unaligned: the executor copies those it runs with)."""
    where = f"{where} {tensor.name!r}" if tensor.name else where
    dims = checked_dims(tensor.dims, where)
    _check_element_type(tensor.data_type, where)
    if tensor.data_location == Tensor.EXTERNAL:
        raise SerializationError(f"{where}: its data is in an external file that was not loaded")
    dtype = from_onnx(tensor.data_type)
    count = math.prod(dims)
    if tensor.data_type == STRING:
        return _strings(tensor, dims, count, where)
    bits = PACKED_BITS.get(tensor.data_type)
    if bits is not None:
        array = _unpacked(tensor, bits, count, where).view(dtype)
    elif tensor.raw_data is not None:
        raw = tensor.raw_data
        if len(raw) != count * dtype.itemsize:
            raise SerializationError(f"{where}: malformed tensor data: {len(raw)} raw bytes for "
                                     f"shape {list(dims)} of {dtype_name(tensor.data_type)} "
                                     f"({count * dtype.itemsize} expected)")
        array = np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype, copy=False)
    else:
        values = getattr(tensor, _TYPED_FIELD[tensor.data_type])
        values = np.asarray(values if len(values) else np.zeros(0))
        if values.size != count:
            raise SerializationError(f"{where}: malformed tensor data: {values.size} values for "
                                     f"shape {list(dims)} ({count} expected)")
        if tensor.data_type == FLOAT16 or tensor.data_type in LOW_PRECISION:
            # float16, bfloat16 and float8 values are stored as their bit patterns
            array = values.astype(np.uint64).astype(f"u{dtype.itemsize}").view(dtype)
        else:
            array = values.astype(dtype)
    array = array.reshape(dims)
    array.setflags(write=False)
    return array


def _check_element_type(code: int, where: str) -> None:
    """Refuse (ShapeError) an element type portable cannot hold, saying why."""
    missing = low_precision_missing(code)
    if missing is not None:
        raise ShapeError(f"{where}: {missing}")
    if code not in ONNX_DTYPES:
        raise ShapeError(f"{where}: element type {dtype_name(code)} is not supported; "
                         f"supported: {', '.join(dtype_name(c) for c in sorted(ONNX_DTYPES))}")


def _unpacked(tensor: Tensor, bits: int, count: int, where: str) -> np.ndarray:
    """The values of a packed 4- or 2-bit tensor, one byte each (their bit patterns).

    ONNX packs ``8 // bits`` values into a byte, the first in the low bits; the last byte is
    padded. ``raw_data`` holds the packed bytes; ``int32_data`` holds one packed byte per int32.
    """
    per_byte = 8 // bits
    size = -(-count // per_byte)
    if tensor.raw_data is not None:
        packed = np.frombuffer(tensor.raw_data, np.uint8)
    else:
        values = np.asarray(tensor.int32_data if len(tensor.int32_data) else np.zeros(0))
        packed = values.astype(np.int64).astype(np.uint8)
    if packed.size != size:
        raise SerializationError(f"{where}: malformed tensor data: {packed.size} packed bytes "
                                 f"for {count} {bits}-bit values ({size} expected)")
    return unpack_bits(packed, bits, count)


STRING = 8


def _strings(tensor: Tensor, dims: tuple[int, ...], count: int, where: str) -> np.ndarray:
    """A string tensor: ``string_data`` (UTF-8 bytes, one entry per element) as a read-only
    object array of str, the form ``onnx.numpy_helper.to_array`` gives."""
    values = list(tensor.string_data)
    if len(values) != count:
        raise SerializationError(f"{where}: malformed tensor data: {len(values)} strings for "
                                 f"shape {list(dims)} ({count} expected)")
    array = np.empty(count, dtype=object)
    array[:] = [_text(v, where) for v in values]  # (slice assignment keeps one str per cell)
    array = array.reshape(dims)
    array.setflags(write=False)
    return array


# Sequence and optional types may nest (optional(seq(tensor))); deeper nesting is refused.
MAX_TYPE_DEPTH = 8


def value_type(info: ValueInfo, where: str) -> ValueType:
    """The type of a graph input or output: a TensorType (symbolic or missing dims become
    None), or a SequenceType / OptionalType of them."""
    return type_from_proto(info.type, f"{where} {info.name!r}")


def type_from_proto(proto: Any, where: str, depth: int = 0) -> ValueType:
    """A TypeProto as portable's type (tensor, sequence, optional); maps and sparse tensors
    are refused naming ``where``."""
    kind = proto.kind if proto is not None else ""
    if depth > MAX_TYPE_DEPTH:
        raise ShapeError(f"{where}: its type nests sequences and optionals more than "
                         f"{MAX_TYPE_DEPTH} deep")
    if kind == "sequence_type" and proto.sequence_type is not None:
        inner = proto.sequence_type.elem_type
        if inner is not None and inner.kind == "tensor_type" and inner.tensor_type is not None \
                and inner.tensor_type.shape is None:  # elements of any rank: dtype only
            _check_element_type(inner.tensor_type.elem_type, f"{where} (element)")
            return SequenceType(dtype=from_onnx(inner.tensor_type.elem_type))
        elem = type_from_proto(inner, f"{where} (element)", depth + 1)
        if not isinstance(elem, TensorType):
            raise ShapeError(f"{where}: a sequence of {elem!r} is not supported (portable's "
                             f"sequences hold tensors)")
        return SequenceType(elem)
    if kind == "optional_type" and proto.optional_type is not None:
        elem = type_from_proto(proto.optional_type.elem_type, f"{where} (element)", depth + 1)
        if isinstance(elem, OptionalType):
            raise ShapeError(f"{where}: an optional of an optional is not a valid ONNX type")
        return OptionalType(elem)
    if kind != "tensor_type" or proto.tensor_type is None:
        raise ShapeError(f"{where}: type {kind or 'missing'} is not supported (portable runs "
                         f"tensors, sequences of tensors and optionals, not maps or sparse "
                         f"tensors)")
    tensor = proto.tensor_type
    _check_element_type(tensor.elem_type, where)
    if tensor.shape is None:
        raise ShapeError(f"{where}: its rank is unknown (no shape); portable needs the rank "
                         f"of every graph input")
    dims = [None if dim.dim_value is None else int(dim.dim_value) for dim in tensor.shape.dim]
    problem = shape_problem(dims, unknown=True)  # (a symbolic dim hides none of the others)
    if problem is not None:
        raise ShapeError(f"{where}: shape {dims[:8]} {problem}")
    return TensorType(dims, from_onnx(tensor.elem_type))


GRAPH = 5
TYPE_PROTO = 13


def attribute_value(attr: Attribute, where: str,
                    read_graph: Callable[[Any, str], Any] | None = None) -> tuple[str, Any]:
    """``(kind, value)`` of an attribute in portable's form: str for strings, lists for
    repeated fields, read-only arrays for tensors, and for a GRAPH attribute (a control-flow
    body) whatever ``read_graph(wire_graph, where)`` makes of it: the importer passes its
    own subgraph reader (which converts the body's nodes as it converts the model's, and bounds
    the nesting depth); without one a subgraph is refused."""
    where = f"{where}: attribute {attr.name!r}"
    if attr.ref_attr_name:
        raise OpAttributeError(f"{where} refers to a function attribute "
                               f"({attr.ref_attr_name!r}); functions are not supported")
    if attr.type == TYPE_PROTO:  # (Optional's 'type')
        if attr.tp is None:
            raise OpAttributeError(f"{where} has type TYPE_PROTO but holds no type")
        return "type_proto", type_from_proto(attr.tp, where)
    if attr.type == GRAPH:
        if attr.g is None:
            raise OpAttributeError(f"{where} has type GRAPH but holds no graph")
        if read_graph is None:
            raise OpAttributeError(f"{where} is a subgraph, which this reader does not read")
        return "graph", read_graph(attr.g, where)
    kind = ATTRIBUTE_KINDS.get(attr.type)
    if kind is None:
        name = ATTRIBUTE_TYPE_NAMES.get(attr.type, f"#{attr.type}")
        hint = " (no standard op takes a list of subgraphs)" if name == "GRAPHS" else ""
        raise OpAttributeError(f"{where} has type {name}, which portable does not "
                               f"support{hint}")
    if kind == "float":
        return kind, float(attr.f)
    if kind == "int":
        return kind, int(attr.i)
    if kind == "string":
        return kind, _text(attr.s, where)
    if kind == "tensor":
        if attr.t is None:
            raise OpAttributeError(f"{where} has type TENSOR but holds no tensor")
        return kind, tensor_to_array(attr.t, where)
    if kind == "floats":
        return kind, [float(v) for v in attr.floats]
    if kind == "ints":
        return kind, [int(v) for v in attr.ints]
    return kind, [_text(v, where) for v in attr.strings]


def _text(raw: Any, where: str) -> str:
    try:
        return bytes(raw if raw is not None else b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OpAttributeError(f"{where}: string is not UTF-8: {exc}") from exc


def coerce_attribute(kind: str, value: Any, expected: str | None, where: str) -> Any:
    """``value`` (of ONNX kind ``kind``) as the kind an op's schema expects; an int is
    accepted for a float, anything else that differs raises OpAttributeError."""
    if kind == expected:
        return value
    if kind == "int" and expected == "float":
        return float(value)
    if kind == "ints" and expected == "floats":
        return [float(v) for v in value]
    raise OpAttributeError(f"{where} has kind {kind}, the op expects {expected}")
