"""ONNX protobuf messages <-> portable values: models, tensors, attributes and value types.

Every failure to read a message becomes one of portable's exceptions naming what was being read
(the file, tensor, attribute or value), so a truncated or corrupted model never escapes as a
protobuf or NumPy error.
"""
from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from portable.dtypes import ONNX_DTYPES, from_onnx, to_onnx
from portable.errors import OpAttributeError, SerializationError, ShapeError
from portable.ir.graph import TensorType

# A tensor or value with more elements than this is refused as absurd (2^40 floats = 4 TiB).
MAX_ELEMENTS = 1 << 40

_DTYPE_NAMES = {code: name for name, code in TensorProto.DataType.items()}


def dtype_name(code: int) -> str:
    """The ONNX name of an element type code (``FLOAT``, ``BFLOAT16``, ...)."""
    return _DTYPE_NAMES.get(int(code), f"#{code}")


def load_model_proto(model: Any, base_dir: str | None = None) -> tuple[onnx.ModelProto, str]:
    """Read ``model`` (a path, serialized bytes or a ModelProto) with its external data.

    Returns:
        The ModelProto and a label naming its source, for messages.
    """
    if isinstance(model, onnx.ModelProto):
        proto, source = model, f"model {model.graph.name or '<unnamed>'!r}"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, source = _parse(bytes(model), "<bytes>"), "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        try:
            with open(source, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise SerializationError(f"cannot read ONNX model {source}: {exc}") from exc
        proto = _parse(data, source)
        base_dir = os.path.dirname(os.path.abspath(source)) if base_dir is None else base_dir
    else:
        raise SerializationError(f"cannot import {type(model).__name__}: give a path, bytes or "
                                 f"an onnx.ModelProto")
    if _has_external_data(proto):
        if base_dir is None:
            raise SerializationError(f"{source}: the model keeps tensors in external data "
                                     f"files; give base_dir= (the folder holding them)")
        if proto is model:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())  # leave theirs as is
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
        except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as exc:
            raise SerializationError(f"{source}: cannot load external data from {base_dir}: "
                                     f"{exc}") from exc
    return proto, source


def _parse(data: bytes, source: str) -> onnx.ModelProto:
    try:
        proto = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise SerializationError(f"{source}: not a valid ONNX model (truncated or corrupted "
                                 f"protobuf, {len(data)} bytes): {exc}") from exc
    if not proto.HasField("graph"):
        raise SerializationError(f"{source}: not an ONNX model: it holds no graph "
                                 f"({len(data)} bytes)")
    return proto


def check_text(proto: onnx.ModelProto, source: str) -> None:
    """Every name the importer reads must be text: protobuf hands back bytes for a string
    field that is not valid UTF-8."""
    graph = proto.graph
    fields = [("opset domain", o.domain) for o in proto.opset_import]
    fields += [("graph input", i.name) for i in graph.input]
    fields += [("graph output", o.name) for o in graph.output]
    fields += [("initializer", t.name) for t in graph.initializer]
    for node in graph.node:
        fields += [("node", node.name), ("op_type", node.op_type), ("domain", node.domain)]
        fields += [("node input", v) for v in node.input]
        fields += [("node output", v) for v in node.output]
        fields += [("attribute", a.name) for a in node.attribute]
    for what, value in fields:
        if not isinstance(value, str):
            raise SerializationError(f"{source}: a {what} name is not valid UTF-8 text: "
                                     f"{bytes(value)[:40]!r}")


def _has_external_data(proto: onnx.ModelProto) -> bool:
    tensors = list(proto.graph.initializer)
    tensors += [attr.t for node in proto.graph.node for attr in node.attribute
                if attr.type == AttributeProto.TENSOR]
    return any(t.data_location == TensorProto.EXTERNAL for t in tensors)


# -- tensors ---------------------------------------------------------------------------------


def checked_dims(dims: Any, where: str) -> tuple[int, ...]:
    """Dimensions that are non-negative and whose product is not absurd."""
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise ShapeError(f"{where}: negative dimension in shape {list(dims)}")
    if math.prod(dims) > MAX_ELEMENTS:
        raise ShapeError(f"{where}: shape {list(dims)} holds {math.prod(dims)} elements, more "
                         f"than portable accepts ({MAX_ELEMENTS})")
    return dims


def tensor_to_array(tensor: TensorProto, where: str) -> np.ndarray:
    """A read-only NumPy array of a TensorProto (external data must already be loaded)."""
    where = f"{where} {tensor.name!r}" if tensor.name else where
    checked_dims(tensor.dims, where)
    if tensor.data_type not in ONNX_DTYPES:
        raise ShapeError(f"{where}: element type {dtype_name(tensor.data_type)} is not "
                         f"supported; supported: "
                         f"{', '.join(dtype_name(c) for c in sorted(ONNX_DTYPES))}")
    if tensor.data_location == TensorProto.EXTERNAL:
        raise SerializationError(f"{where}: its data is in an external file that was not loaded")
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as exc:  # onnx raises ValueError, TypeError or others on bad data
        raise SerializationError(f"{where}: malformed tensor data (shape {list(tensor.dims)}, "
                                 f"type {dtype_name(tensor.data_type)}): {exc}") from exc
    array = np.asarray(array, dtype=from_onnx(tensor.data_type), order="C")
    array.setflags(write=False)
    return array


def array_to_tensor(array: np.ndarray, name: str) -> TensorProto:
    """A TensorProto holding ``array`` (its dtype must have an ONNX element type)."""
    array = np.asarray(array)
    to_onnx(array.dtype)  # raises ShapeError naming the dtype when ONNX has none
    return numpy_helper.from_array(np.asarray(array, order="C"), name)


# -- value types -----------------------------------------------------------------------------


def value_type(info: onnx.ValueInfoProto, where: str) -> TensorType:
    """The TensorType of a graph input or output; symbolic or missing dims become None."""
    where = f"{where} {info.name!r}"
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ShapeError(f"{where}: type {kind or 'missing'} is not supported (portable runs "
                         f"tensors only, not sequences, maps or optionals)")
    tensor = info.type.tensor_type
    if tensor.elem_type not in ONNX_DTYPES:
        raise ShapeError(f"{where}: element type {dtype_name(tensor.elem_type)} is not "
                         f"supported")
    if not tensor.HasField("shape"):
        raise ShapeError(f"{where}: its rank is unknown (no shape); portable needs the rank "
                         f"of every graph input")
    dims = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            if dim.dim_value < 0:
                raise ShapeError(f"{where}: negative dimension {dim.dim_value}")
            dims.append(int(dim.dim_value))
        else:
            dims.append(None)
    checked_dims([d or 0 for d in dims], where)
    return TensorType(dims, from_onnx(tensor.elem_type))


def value_info(name: str, type_: TensorType, dim_names: dict[int, str] | None = None
               ) -> onnx.ValueInfoProto:
    """A ValueInfoProto; dims that are None or named in ``dim_names`` become symbolic."""
    dims: list[Any] = []
    for axis, dim in enumerate(type_.shape):
        symbolic = (dim_names or {}).get(axis)
        dims.append(symbolic if symbolic is not None else
                    (f"{name}_dim{axis}" if dim is None else int(dim)))
    return helper.make_tensor_value_info(name, to_onnx(type_.dtype), dims)


# -- attributes ------------------------------------------------------------------------------

_ATTRIBUTE_KINDS = {
    AttributeProto.FLOAT: "float", AttributeProto.INT: "int", AttributeProto.STRING: "string",
    AttributeProto.TENSOR: "tensor", AttributeProto.FLOATS: "floats",
    AttributeProto.INTS: "ints", AttributeProto.STRINGS: "strings",
}


def attribute_value(attr: AttributeProto, where: str) -> tuple[str, Any]:
    """``(kind, value)`` of an attribute in portable's form: str for strings, lists for
    repeated fields, read-only arrays for tensors."""
    where = f"{where}: attribute {attr.name!r}"
    if attr.ref_attr_name:
        raise OpAttributeError(f"{where} refers to a function attribute "
                               f"({attr.ref_attr_name!r}); functions are not supported")
    kind = _ATTRIBUTE_KINDS.get(attr.type)
    if kind is None:
        name = AttributeProto.AttributeType.Name(attr.type) \
            if attr.type in AttributeProto.AttributeType.values() else f"#{attr.type}"
        hint = " (subgraphs: control flow such as If/Loop/Scan is not supported)" \
            if name in ("GRAPH", "GRAPHS") else ""
        raise OpAttributeError(f"{where} has type {name}, which portable does not "
                               f"support{hint}")
    if kind == "float":
        return kind, float(attr.f)
    if kind == "int":
        return kind, int(attr.i)
    if kind == "string":
        return kind, _text(attr.s, where)
    if kind == "tensor":
        return kind, tensor_to_array(attr.t, where)
    if kind == "floats":
        return kind, [float(v) for v in attr.floats]
    if kind == "ints":
        return kind, [int(v) for v in attr.ints]
    return kind, [_text(v, where) for v in attr.strings]


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OpAttributeError(f"{where}: string is not UTF-8: {exc}") from exc


def coerce_attribute(kind: str, value: Any, expected: str, where: str) -> Any:
    """``value`` (of ONNX kind ``kind``) as the kind an op's schema expects; an int is
    accepted for a float, anything else that differs raises OpAttributeError."""
    if kind == expected:
        return value
    if kind == "int" and expected == "float":
        return float(value)
    if kind == "ints" and expected == "floats":
        return [float(v) for v in value]
    raise OpAttributeError(f"{where} has kind {kind}, the op expects {expected}")


def make_attribute(name: str, value: Any, kind: str | None = None) -> AttributeProto:
    """An AttributeProto from a portable attribute value (``kind`` disambiguates empty
    lists)."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, array_to_tensor(value, ""))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        value = [v.item() if isinstance(v, np.generic) else v for v in value]
        if not value:
            attr_type = {"floats": AttributeProto.FLOATS, "strings": AttributeProto.STRINGS
                         }.get(kind or "", AttributeProto.INTS)
            return helper.make_attribute(name, [], attr_type=attr_type)
        if kind == "floats":
            value = [float(v) for v in value]
    elif kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif isinstance(value, bool):
        value = int(value)
    return helper.make_attribute(name, value)
