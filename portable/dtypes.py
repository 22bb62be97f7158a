"""ONNX TensorProto element types <-> NumPy dtypes, as plain data (no onnx import needed), and
the tensor types a file may declare: the dtype names and shapes every loader accepts.

A loader reads a dtype name or a shape from a file someone else wrote. ``np.dtype`` parses far
more than dtype names (``"V99999999999"``, ``"f4,i8"``, ``"(2)f4"``; some strings make it raise
SyntaxError), and ``np.prod`` of int64 dims wraps around to 0 for ``[2**32, 2**32, 16]``; so
loaders look names up in a table (``dtype_named``) and count elements with Python ints
(``shape_problem``). Both report a failure by their result, so each loader raises its own error
naming its file and field.

Example:
    >>> dtype_named("float32"), dtype_named("float32;import os")
    (dtype('float32'), None)
    >>> shape_problem([2**32, 2**32, 16])[:62]
    'is too large: its dimensions multiply to 295147905179352825856'
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.errors import ShapeError

ONNX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("float32"), 2: np.dtype("uint8"), 3: np.dtype("int8"), 4: np.dtype("uint16"),
    5: np.dtype("int16"), 6: np.dtype("int32"), 7: np.dtype("int64"), 9: np.dtype("bool"),
    10: np.dtype("float16"), 11: np.dtype("float64"), 12: np.dtype("uint32"),
    13: np.dtype("uint64"),
}
_CODES = {dtype: code for code, dtype in ONNX_DTYPES.items()}


def to_onnx(dtype: Any) -> int:
    """The ONNX element type code of a NumPy dtype."""
    try:
        return _CODES[np.dtype(dtype)]
    except KeyError:
        raise ShapeError(f"dtype {np.dtype(dtype)} has no ONNX element type") from None


def from_onnx(code: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type code."""
    try:
        return ONNX_DTYPES[int(code)]
    except KeyError:
        raise ShapeError(f"ONNX element type {code} is not supported; supported: "
                         f"{sorted(ONNX_DTYPES)}") from None


# -- tensor types read from files ----------------------------------------------------------------

# The dtypes portable computes with, by their NumPy name (what every writer records: ``.name``).
FILE_DTYPES: dict[str, np.dtype] = {dtype.name: dtype for dtype in ONNX_DTYPES.values()}
# A dimension read from a file is below this, so that sizes and byte offsets computed from it stay
# exact in int64 arithmetic (NumPy's) whatever the itemsize.
MAX_DIM = 1 << 62
# The most elements a tensor read from a file may hold: fewer than 2^40 (2^40 float32 would be
# 4 TiB), so a file declaring exactly 2^40 is refused as well.
MAX_ELEMENTS = (1 << 40) - 1
# The most dimensions a shape read from a file may have: NumPy before 2.0 allows no more (2.x
# allows 64), and no model comes near it.
MAX_RANK = 32


def dtype_named(name: Any) -> np.dtype | None:
    """The dtype a file names (``"float32"``, ``"int64"``, ``"bool"``...), or None when ``name``
    is not one of ``FILE_DTYPES`` (anything else, including other spellings NumPy would parse).

    Example:
        >>> dtype_named("int8"), dtype_named("<f4"), dtype_named(3)
        (dtype('int8'), None, None)
    """
    return FILE_DTYPES.get(name) if isinstance(name, str) else None


def element_count(shape: Any) -> int:
    """The number of elements of ``shape`` (an iterable of ints), as an exact Python int."""
    return math.prod(int(d) for d in shape)


def shape_problem(shape: Any, *, unknown: bool = False, minimum: int = 0) -> str | None:
    """What is wrong with a shape read from a file, or None when nothing is.

    A shape is a list or tuple of at most ``MAX_RANK`` ints (not bools) with ``minimum <= d <
    MAX_DIM`` (None too, for an unknown dim, when ``unknown``), holding at most ``MAX_ELEMENTS``
    elements. Zero dims
    do not hide the others: NumPy refuses ``(0, 2**40, 2**40)`` as too big, so the product of
    the non-zero (and known) dims is what is bounded, counted with Python ints.

    Args:
        shape: the value read.
        unknown: whether None stands for an unknown dim.
        minimum: the smallest dim allowed (-1 where a format lets -1 mean "unknown").

    Example:
        >>> shape_problem([2, None], unknown=True) is None
        True
        >>> shape_problem([2, -3])
        'has negative dimension -3'
    """
    if not isinstance(shape, (list, tuple)):
        return f"is a {type(shape).__name__}, not a list of ints"
    if len(shape) > MAX_RANK:
        return f"has {len(shape)} dimensions, more than portable accepts ({MAX_RANK})"
    for dim in shape:
        if dim is None and unknown:
            continue
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, (bool, np.bool_)):
            return f"has a dimension {dim!r:.40} that is not an int"
        if dim < minimum:
            least = f" (the least allowed is {minimum})" if minimum < 0 else ""
            return f"has negative dimension {dim}{least}"
        if dim >= MAX_DIM:
            return f"has dimension {dim}, out of range (at most 2**62 - 1)"
    extent = math.prod(int(d) for d in shape if d is not None and d > 0)
    if extent > MAX_ELEMENTS:
        return (f"is too large: its dimensions multiply to {extent} (portable accepts at most "
                f"{MAX_ELEMENTS} elements)")
    return None
