"""portable values -> ONNX protobuf messages (for the exporter): tensors, value infos and
attributes. Reading goes the other way without ``onnx``: ``wire.py`` and ``reading.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto, TypeProto, ValueInfoProto, helper, numpy_helper

from portable.dtypes import to_onnx
from portable.errors import ShapeError
from portable.ir.graph import TensorType
from portable.ir.types import OptionalType, SequenceType


def array_to_tensor(array: np.ndarray, name: str) -> TensorProto:
    """A TensorProto holding ``array`` (its dtype must have an ONNX element type).

    ml_dtypes' types are written as onnx writes them: bfloat16 and float8 as their bytes,
    int4/uint4/float4e2m1 two to a byte and int2/uint2 four to a byte, the first element in
    the low bits (``portable.io.onnx.reading`` reads that layout back without onnx)."""
    array = np.asarray(array)
    to_onnx(array.dtype)  # raises ShapeError naming the dtype when ONNX has none
    return numpy_helper.from_array(np.asarray(array, order="C"), name)


def value_info(name: str, type_: Any, dim_names: dict[int, str] | None = None
               ) -> ValueInfoProto:
    """A ValueInfoProto; dims that are None or named in ``dim_names`` become symbolic. A
    sequence or optional (``portable.ir.types``) is written as ``sequence_type`` /
    ``optional_type``."""
    if not isinstance(type_, TensorType):
        return helper.make_value_info(name, type_proto(type_, name))
    dims: list[Any] = []
    for axis, dim in enumerate(type_.shape):
        symbolic = (dim_names or {}).get(axis)
        dims.append(symbolic if symbolic is not None else
                    (f"{name}_dim{axis}" if dim is None else int(dim)))
    return helper.make_tensor_value_info(name, to_onnx(type_.dtype), dims)


def type_proto(type_: Any, name: str = "") -> TypeProto:
    """The TypeProto of a portable type: a tensor (None dims symbolic, named after ``name``),
    a sequence (elements of unknown rank: no shape) or an optional."""
    if isinstance(type_, OptionalType):
        return helper.make_optional_type_proto(type_proto(type_.elem, name))
    if isinstance(type_, SequenceType):
        if type_.elem is not None:
            elem = type_proto(type_.elem, f"{name}_elem")
        elif type_.dtype is not None:
            elem = helper.make_tensor_type_proto(to_onnx(type_.dtype), None)
        else:
            raise ShapeError(f"value {name!r}: the elements of {type_!r} have no known dtype; "
                             f"ONNX needs one")
        return helper.make_sequence_type_proto(elem)
    dims = [f"{name}_dim{axis}" if d is None else int(d) for axis, d in enumerate(type_.shape)]
    return helper.make_tensor_type_proto(to_onnx(type_.dtype), dims)


def make_attribute(name: str, value: Any, kind: str | None = None) -> AttributeProto:
    """An AttributeProto from a portable attribute value (``kind`` disambiguates empty
    lists)."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, array_to_tensor(value, ""))
    if isinstance(value, (TensorType, SequenceType, OptionalType)):  # Optional's 'type'
        return helper.make_attribute(name, type_proto(value, name))
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
