"""ONNX TensorProto element types <-> NumPy dtypes, as plain data (no onnx import needed), and
the tensor types a file may declare: the dtype names and shapes every loader accepts.

bfloat16, float8, float4 and the 4- and 2-bit integers are ml_dtypes' NumPy types, brought in on
first need (``LOW_PRECISION``): ``ONNX_DTYPES[16]`` imports ml_dtypes, ``import portable`` does
not. ``is_float`` / ``is_integer`` / ``type_info`` answer for them as for NumPy's own.

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
    # Strings are NumPy object arrays of Python str: the string ops (Equal, StringConcat,
    # StringSplit, RegexFullMatch, StringNormalizer, TfIdfVectorizer) compute with them on the
    # host. They hold references, not bytes, so the memory planner keeps them out of its arena
    # (``is_string``), backends without host arrays refuse them, and no file format reads them.
    8: np.dtype(object),
}
_CODES = {dtype: code for code, dtype in ONNX_DTYPES.items()}
STRING = np.dtype(object)


def is_string(dtype: Any) -> bool:
    """Whether ``dtype`` is the string element type (ONNX STRING: NumPy object arrays of str)."""
    return np.dtype(dtype) == STRING


# -- low-precision element types (ml_dtypes) -------------------------------------------------------

# bfloat16, the float8 family, float4 and the 4- and 2-bit integers are the NumPy extension types
# of ml_dtypes (the ones onnx and JAX use). It is an optional dependency, imported on first need
# (a model or call that names one of these types), so that `import portable` needs NumPy alone.
# In memory each element takes a whole byte (bfloat16: two); only files pack 4- and 2-bit values.
LOW_PRECISION: dict[int, str] = {
    16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
    20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu",
    25: "uint2", 26: "int2",
}
# Element types packed on the wire (ONNX's layout: the first element in the low bits of a byte).
PACKED_BITS: dict[int, int] = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
_INTEGER_CODES = frozenset((21, 22, 25, 26))


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``count`` bit patterns (one uint8 each) held in ``packed`` (uint8) at ``bits`` bits
    per value, ONNX's layout: ``8 // bits`` values a byte, the first in the low bits."""
    mask = np.uint8((1 << bits) - 1)
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((np.asarray(packed, np.uint8)[:, None] >> shifts) & mask).reshape(-1)[:count]


def pack_bits(patterns: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of ``unpack_bits``: uint8 bit patterns (any shape) packed, the last byte
    padded with zeros.

    Example:
        >>> pack_bits(np.array([1, 2, 3], np.uint8), 4).tolist()
        [33, 3]
    """
    per_byte = 8 // bits
    flat = np.asarray(patterns).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    padded = np.zeros(-(-flat.size // per_byte) * per_byte, np.uint8)
    padded[:flat.size] = flat
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)
_LOW_NAMES = frozenset(LOW_PRECISION.values())
_LOADED: list[bool] = []  # [True] once ml_dtypes' types are in the tables


def _load_low_precision() -> bool:
    """Add ml_dtypes' types to ONNX_DTYPES and the reverse table; False when it is missing."""
    if _LOADED:
        return _LOADED[0]
    try:
        import ml_dtypes
    except ImportError:
        _LOADED.append(False)
        return False
    for code, name in LOW_PRECISION.items():
        dtype = np.dtype(getattr(ml_dtypes, name))
        dict.__setitem__(ONNX_DTYPES, code, dtype)
        _CODES[dtype] = code
    _LOADED.append(True)
    return True


class _ElementTypes(dict):
    """ONNX_DTYPES: a dict that brings in ml_dtypes' types the first time a low-precision code
    is looked up, or the whole table is listed (never at import)."""

    def _full(self) -> "_ElementTypes":
        _load_low_precision()
        return self

    def __getitem__(self, code: Any) -> np.dtype:
        if code in LOW_PRECISION:
            self._full()
        return dict.__getitem__(self, code)

    def __contains__(self, code: Any) -> bool:
        if code in LOW_PRECISION:
            self._full()
        return dict.__contains__(self, code)

    def get(self, code: Any, default: Any = None) -> Any:
        return self[code] if code in self else default

    def __iter__(self):
        return dict.__iter__(self._full())

    def __len__(self) -> int:
        return dict.__len__(self._full())

    def keys(self):
        return dict.keys(self._full())

    def values(self):
        return dict.values(self._full())

    def items(self):
        return dict.items(self._full())

    def __repr__(self) -> str:
        return dict.__repr__(self._full())


ONNX_DTYPES = _ElementTypes(ONNX_DTYPES)


def low_precision_missing(code: int) -> str | None:
    """Why element type ``code`` cannot be held here (ml_dtypes is not installed), or None."""
    if int(code) in LOW_PRECISION and not _load_low_precision():
        return (f"element type {LOW_PRECISION[int(code)]} needs the ml_dtypes package "
                f"(pip install ml_dtypes)")
    return None


def is_low_precision(dtype: Any) -> bool:
    """Whether ``dtype`` is one of ml_dtypes' types (without importing ml_dtypes)."""
    dtype = np.dtype(dtype)
    return dtype.name in _LOW_NAMES and dtype.type.__module__.startswith("ml_dtypes")


def is_float(dtype: Any) -> bool:
    """Whether ``dtype`` holds floating-point numbers: NumPy's (kind "f") or ml_dtypes' float
    types (bfloat16, float8, float4), whose NumPy kind is "V"."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or (is_low_precision(dtype) and
                                 _CODES.get(dtype) not in _INTEGER_CODES)


def is_integer(dtype: Any) -> bool:
    """Whether ``dtype`` holds integers: NumPy's (kinds "i", "u") or ml_dtypes' int4/uint4/
    int2/uint2."""
    dtype = np.dtype(dtype)
    return dtype.kind in "iu" or (is_low_precision(dtype) and _CODES.get(dtype) in _INTEGER_CODES)


def type_info(dtype: Any) -> Any:
    """``finfo`` or ``iinfo`` of any element type, ml_dtypes' included (NumPy's own refuse
    them)."""
    dtype = np.dtype(dtype)
    if is_low_precision(dtype):
        import ml_dtypes  # (present: an array of its type exists)

        return ml_dtypes.iinfo(dtype) if is_integer(dtype) else ml_dtypes.finfo(dtype)
    return np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)


def to_onnx(dtype: Any) -> int:
    """The ONNX element type code of a NumPy dtype."""
    dtype = np.dtype(dtype)
    if dtype not in _CODES and is_low_precision(dtype):
        _load_low_precision()
    try:
        return _CODES[dtype]
    except KeyError:
        raise ShapeError(f"dtype {dtype} has no ONNX element type") from None


def from_onnx(code: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type code."""
    missing = low_precision_missing(code)
    if missing is not None:
        raise ShapeError(f"ONNX {missing}")
    try:
        return ONNX_DTYPES[int(code)]
    except KeyError:
        raise ShapeError(f"ONNX element type {code} is not supported; supported: "
                         f"{sorted(ONNX_DTYPES)}") from None


# -- tensor types read from files ----------------------------------------------------------------

# The dtypes portable computes with, by their NumPy name (what every writer records: ``.name``).
# (NumPy's own types: listing ONNX_DTYPES here would import ml_dtypes with portable.)
FILE_DTYPES: dict[str, np.dtype] = {dtype.name: dtype for dtype in _CODES
                                   if dtype != STRING}  # (object arrays: never from bytes)
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
