"""How NumPy dtypes live in OpenCL C: storage type, compute type, loads and stores.

float16 is storage only (``vload_half``/``vstore_half_rte`` are core OpenCL, no cl_khr_fp16
needed) and computes in float; bool is stored as one byte holding 0 or 1 (NumPy's layout) and
computes as int. Everything else computes in its own C type.

Example:
    >>> ctype(np.dtype("float16")).compute
    'float'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from portable.errors import BackendError


@dataclass(frozen=True)
class CType:
    """The C side of one dtype."""

    dtype: np.dtype
    storage: str      # element type of the buffer
    compute: str      # type values are computed in
    numpy_compute: np.dtype  # NumPy type of a compute-typed scalar kernel argument

    def load(self, pointer: str, index: str) -> str:
        if self.storage == "half":
            return f"vload_half({index}, {pointer})"
        if self.dtype.kind == "b":
            return f"((int)({pointer}[{index}] != 0))"
        return f"{pointer}[{index}]"

    def store(self, pointer: str, index: str, value: str) -> str:
        if self.storage == "half":
            return f"vstore_half_rte((float)({value}), {index}, {pointer})"
        if self.dtype.kind == "b":
            return f"{pointer}[{index}] = (uchar)(({value}) != 0)"
        return f"{pointer}[{index}] = ({self.storage})({value})"

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    def scalar(self, value: Any) -> float | int:
        """``value`` as a kernel argument of the compute type (a Python scalar: kernels
        declare their argument types)."""
        return float(value) if self.numpy_compute.kind == "f" else int(value)

    def literal(self, value: float) -> str:
        """A C literal of the compute type (no double literal in float code)."""
        if self.compute == "float":
            text = repr(float(value))
            return f"{text}f" if "e" in text or "." in text else f"{text}.0f"
        if self.compute == "double":
            return repr(float(value))
        return f"(({self.compute}){int(value)})"


_TABLE = {
    "float32": ("float", "float", np.float32),
    "float64": ("double", "double", np.float64),
    "float16": ("half", "float", np.float32),
    "int64": ("long", "long", np.int64),
    "int32": ("int", "int", np.int32),
    "int16": ("short", "short", np.int16),
    "int8": ("char", "char", np.int8),
    "uint64": ("ulong", "ulong", np.uint64),
    "uint32": ("uint", "uint", np.uint32),
    "uint16": ("ushort", "ushort", np.uint16),
    "uint8": ("uchar", "uchar", np.uint8),
    "bool": ("uchar", "int", np.int32),
}


def ctype(dtype: Any) -> CType:
    """The C description of ``dtype``; an unsupported dtype raises BackendError."""
    dtype = np.dtype(dtype)
    hit = _CTYPES.get(dtype)
    return hit if hit is not None else _make_ctype(dtype)


_CTYPES: dict[np.dtype, CType] = {}


def _make_ctype(dtype: np.dtype) -> CType:
    try:
        storage, compute, numpy_compute = _TABLE[dtype.name]
    except KeyError:
        raise BackendError(f"dtype {dtype} is not supported by the OpenCL backend; "
                           f"supported: {', '.join(_TABLE)}") from None
    result = _CTYPES[dtype] = CType(dtype, storage, compute, np.dtype(numpy_compute))
    return result


def preamble(dtypes: Any) -> str:
    """Pragmas a program needs for ``dtypes`` (double arithmetic)."""
    names = {np.dtype(d).name for d in dtypes}
    return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if "float64" in names else ""


def limits(dtype: Any) -> tuple[str, str]:
    """C literals of the lowest and highest value of ``dtype`` (infinities for floats)."""
    dtype = np.dtype(dtype)
    c = ctype(dtype)
    if dtype.kind == "f":
        return "(-INFINITY)", "INFINITY"
    if dtype.kind == "b":
        return "0", "1"
    info = np.iinfo(dtype)
    suffix = ("U" if dtype.kind == "u" else "") + ("L" if dtype.itemsize == 8 else "")
    low = f"({c.compute})(-{-info.min - 1}{suffix} - 1)" if info.min else f"({c.compute})0"
    return low, f"({c.compute})({info.max}{suffix})"
