"""Attribute values <-> JSON-able values, shared by every JSON format portable writes (symbol
files, IR graphs in deployment files).

Numbers, strings, booleans and None are themselves; lists and tuples become lists; dicts keep
their (string) keys; a NumPy array becomes ``{"__tensor__": {"dtype", "shape", "data"}}`` with
its elements as a flat list (exact for every numeric dtype: float32 and float16 values are
exactly representable as JSON doubles). Decoding checks tensor records and raises
SerializationError saying what is wrong with them.

Example:
    >>> encode_value((1, 2))
    [1, 2]
    >>> decode_value(encode_value(np.arange(3, dtype=np.int8))).dtype
    dtype('int8')
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import FILE_DTYPES, dtype_named, element_count, shape_problem
from portable.errors import SerializationError

TENSOR_KEY = "__tensor__"
# Element kinds a tensor value may have: bool, signed and unsigned ints, floats.
_TENSOR_KINDS = "biuf"
# The JSON values each kind's data may hold (what ``tolist`` gives, and ints for floats).
_ELEMENT_TYPES = {"b": (bool,), "i": (int,), "u": (int,), "f": (float, int)}
_NONE = object()


def encode_value(value: Any) -> Any:
    """A JSON-able form of ``value`` (an attribute or metadata value).

    Args:
        value: a number, string, bool, None, NumPy scalar or array, or a list, tuple or dict of
            these.

    Returns:
        The value with arrays as ``{"__tensor__": ...}`` records and tuples as lists.

    Raises:
        SerializationError: for an array of a non-numeric dtype or a value JSON cannot hold.

    Example:
        >>> encode_value(np.float32(0.5))
        0.5
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _TENSOR_KINDS or dtype_named(value.dtype.name) is None:
            raise SerializationError(f"cannot store a {value.dtype} tensor as JSON (numbers and "
                                     f"booleans of portable's dtypes only)")
        return {TENSOR_KEY: {"dtype": value.dtype.name, "shape": list(value.shape),
                             "data": value.reshape(-1).tolist()}}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return encode_value(value.item())  # (a complex or datetime item is refused below)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SerializationError(f"cannot store a {type(value).__name__} value as JSON: {value!r:.60}")


def decode_value(value: Any) -> Any:
    """The value ``encode_value`` encoded: tensor records become arrays; lists stay lists (the
    IR freezes them into tuples).

    Raises:
        SerializationError: a tensor record lacks a field, names an unknown or non-numeric
            dtype, or its data does not fill its shape.

    Example:
        >>> decode_value({"__tensor__": {"dtype": "float32", "shape": [2], "data": [1, 2]}})
        array([1., 2.], dtype=float32)
    """
    if isinstance(value, dict):
        if TENSOR_KEY in value:
            return _decode_tensor(value[TENSOR_KEY])
        return {k: decode_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    return value


def _decode_tensor(spec: Any) -> np.ndarray:
    if not isinstance(spec, dict) or not {"dtype", "shape", "data"} <= set(spec):
        got = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise SerializationError(f"a tensor value needs \"dtype\", \"shape\" and \"data\"; "
                                 f"got {got}")
    # Looked up by name, never given to np.dtype: it parses far more than names.
    dtype = dtype_named(spec["dtype"])
    if dtype is None:
        raise SerializationError(f"a tensor value has an unknown dtype {spec['dtype']!r:.40} "
                                 f"(portable reads {', '.join(FILE_DTYPES)})")
    if dtype.kind not in _TENSOR_KINDS:
        raise SerializationError(f"a tensor value has dtype {dtype}; only numbers and booleans "
                                 f"are stored")
    shape = spec["shape"]
    problem = shape_problem(shape)
    if problem is not None:
        raise SerializationError(f"a tensor value's shape {problem}: {shape!r:.60}")
    data = spec["data"]
    if not isinstance(data, list):
        raise SerializationError(f"a tensor value's data is a {type(data).__name__}, not a flat "
                                 f"list of numbers")
    count = element_count(shape)  # exact: a Python int, no int64 wrap-around
    if len(data) != count:
        raise SerializationError(f"a tensor value of shape {tuple(shape)} holds {len(data)} "
                                 f"elements, not {count}")
    # What encode_value writes for the kind: NumPy would also take strings ("1.5"), None
    # (as NaN) or floats for ints (truncated), and read them as something else.
    allowed = _ELEMENT_TYPES[dtype.kind]
    odd = next((v for v in data if type(v) not in allowed), _NONE)
    if odd is not _NONE:
        raise SerializationError(f"a {dtype} tensor value holds {type(odd).__name__} "
                                 f"{odd!r:.40}; its data must be a flat list of "
                                 f"{'/'.join(t.__name__ for t in allowed)} values")
    try:
        with np.errstate(over="raise", invalid="raise"):
            flat = np.asarray(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError, FloatingPointError) as exc:
        raise SerializationError(f"a {dtype} tensor value holds data that is not {dtype}: "
                                 f"{exc}") from exc
    return flat.reshape(shape)
