"""ONNX TensorProto element types <-> NumPy dtypes, as plain data (no onnx import needed)."""
from __future__ import annotations

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
