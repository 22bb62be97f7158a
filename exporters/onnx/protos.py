"""portable values -> ONNX protobuf messages (for the exporter): tensors, value infos and
attributes. Reading goes the other way without ``onnx``: ``wire.py`` and ``reading.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from portable.dtypes import to_onnx
from portable.ir.graph import TensorType


def array_to_tensor(array: np.ndarray, name: str) -> TensorProto:
    """A TensorProto holding ``array`` (its dtype must have an ONNX element type).

    ml_dtypes' types are written as onnx writes them: bfloat16 and float8 as their bytes,
    int4/uint4/float4e2m1 two to a byte and int2/uint2 four to a byte, the first element in
    the low bits (``portable.io.onnx.reading`` reads that layout back without onnx)."""
    array = np.asarray(array)
    to_onnx(array.dtype)  # raises ShapeError naming the dtype when ONNX has none
    return numpy_helper.from_array(np.asarray(array, order="C"), name)


def value_info(name: str, type_: TensorType, dim_names: dict[int, str] | None = None
               ) -> ValueInfoProto:
    """A ValueInfoProto; dims that are None or named in ``dim_names`` become symbolic."""
    dims: list[Any] = []
    for axis, dim in enumerate(type_.shape):
        symbolic = (dim_names or {}).get(axis)
        dims.append(symbolic if symbolic is not None else
                    (f"{name}_dim{axis}" if dim is None else int(dim)))
    return helper.make_tensor_value_info(name, to_onnx(type_.dtype), dims)


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
