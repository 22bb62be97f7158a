"""How NumPy dtypes live in OpenCL C: storage type, compute type, loads and stores.

float16 is storage only (``vload_half``/``vstore_half_rte`` are core OpenCL, no cl_khr_fp16
needed) and computes in float; bool is stored as one byte holding 0 or 1 (NumPy's layout) and
computes as int. ml_dtypes' types (bfloat16, float8, float4, the 4- and 2-bit integers) are
storage formats too: they compute in float (int) through the load and store functions of
``formats``, which ``preamble`` adds to a program that names them. Everything else computes in
its own C type.

Example:
    >>> ctype(np.dtype("float16")).compute
    'float'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from portable.errors import BackendError

from backends.opencl.formats import FORMATS, format_source


@dataclass(frozen=True)
class CType:
    """The C side of one dtype."""

    dtype: np.dtype
    storage: str      # element type of the buffer
    compute: str      # type values are computed in
    numpy_compute: np.dtype  # NumPy type of a compute-typed scalar kernel argument
    loader: str = ""  # C function storage -> compute of a storage format (``formats``)
    storer: str = ""  # C function compute -> storage

    def load(self, pointer: str, index: str) -> str:
        if self.loader:
            return f"{self.loader}({pointer}[{index}])"
        if self.storage == "half":
            return f"vload_half({index}, {pointer})"
        if self.dtype.kind == "b":
            return f"((int)({pointer}[{index}] != 0))"
        return f"{pointer}[{index}]"

    def store(self, pointer: str, index: str, value: str) -> str:
        if self.storer:
            return f"{pointer}[{index}] = {self.storer}(({self.compute})({value}))"
        if self.storage == "half":
            return f"vstore_half_rte((float)({value}), {index}, {pointer})"
        if self.dtype.kind == "b":
            return f"{pointer}[{index}] = (uchar)(({value}) != 0)"
        return f"{pointer}[{index}] = ({self.storage})({value})"

    @property
    def is_float(self) -> bool:
        """Whether values compute as floats (ml_dtypes' float8_e5m2 has NumPy kind "f", its
        other floats kind "V": the compute type says)."""
        return self.numpy_compute.kind == "f"

    @property
    def kind(self) -> str:
        """The NumPy kind values compute as: "f", "i", "u" or "b" (bool)."""
        return "b" if self.dtype.kind == "b" else self.numpy_compute.kind

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
    fmt = FORMATS.get(dtype.name) if _is_ml_dtype(dtype) else None
    if fmt is not None:
        numpy_compute = np.float32 if fmt.compute == "float" else np.int32
        result = _CTYPES[dtype] = CType(dtype, fmt.storage, fmt.compute,
                                        np.dtype(numpy_compute), fmt.load, fmt.store)
        return result
    try:
        storage, compute, numpy_compute = _TABLE[dtype.name]
    except KeyError:
        raise BackendError(f"dtype {dtype} is not supported by the OpenCL backend; "
                           f"supported: {', '.join(list(_TABLE) + list(FORMATS))}") from None
    result = _CTYPES[dtype] = CType(dtype, storage, compute, np.dtype(numpy_compute))
    return result


def _is_ml_dtype(dtype: np.dtype) -> bool:
    return dtype.type.__module__.startswith("ml_dtypes")


def storage_view_dtype(dtype: Any) -> np.dtype:
    """The NumPy unsigned integer type of ``dtype``'s width for a storage format (host copies
    and bit copies see its elements as that: NumPy's buffer protocol refuses ml_dtypes'
    types), else ``dtype`` itself."""
    dtype = np.dtype(dtype)
    if dtype.name in FORMATS and _is_ml_dtype(dtype):
        return np.dtype(f"uint{8 * dtype.itemsize}")
    return dtype


def preamble(dtypes: Any) -> str:
    """What a program needs for ``dtypes``: pragmas (double arithmetic) and the load and
    store functions of storage formats."""
    names = {np.dtype(d).name for d in dtypes}
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if "float64" in names else ""
    return pragma + format_source(sorted(n for n in names if n in FORMATS))


def limits(dtype: Any) -> tuple[str, str]:
    """C literals of the lowest and highest value of ``dtype`` (infinities for floats)."""
    dtype = np.dtype(dtype)
    c = ctype(dtype)
    if c.is_float:
        return "(-INFINITY)", "INFINITY"
    if dtype.kind == "b":
        return "0", "1"
    if c.loader:  # (the 4- and 2-bit integers: their range in the int they compute in)
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
        return f"(({c.compute}){int(info.min)})", f"(({c.compute}){int(info.max)})"
    info = np.iinfo(dtype)
    suffix = ("U" if dtype.kind == "u" else "") + ("L" if dtype.itemsize == 8 else "")
    low = f"({c.compute})(-{-info.min - 1}{suffix} - 1)" if info.min else f"({c.compute})0"
    return low, f"({c.compute})({info.max}{suffix})"
