"""Linear quantization: QuantizeLinear and DequantizeLinear (ONNX's int8 / int16 model format).

``DequantizeLinear``: ``y = (x - zero_point) * scale``; ``QuantizeLinear``:
``y = saturate(round_half_to_even(x / scale) + zero_point)``. The scale and zero point are one
value (per tensor), a vector along ``axis`` (per axis), or, with ``block_size``, one value per
block of ``block_size`` elements along ``axis`` (blocked). Not differentiable.

The quantized types are the 8- and 16-bit integers and, through ml_dtypes, the 4- and 2-bit
integers, float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz: no zero point is added, and ``saturate``
clamps to the largest finite value) and float4e2m1. ``convert`` is ONNX Cast's conversion
(saturating float8, rounding float8e8m0), shared by the Cast and QuantizeLinear kernels.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.dtypes import (LOW_PRECISION, ONNX_DTYPES, PACKED_BITS, from_onnx, is_float,
                             low_precision_missing, to_onnx, type_info)
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import normalize_axis

# Element types by ONNX code (ml_dtypes' types are only imported when a model uses them).
INTEGER_QUANTIZED = frozenset((2, 3, 4, 5, 21, 22, 25, 26))  # (u)int8, (u)int16, (u)int4, (u)int2
FLOAT8 = frozenset((17, 18, 19, 20))  # e4m3fn, e4m3fnuz, e5m2, e5m2fnuz: saturate applies
FLOAT4 = 23                           # e2m1: no inf or NaN, so casts always saturate
FLOAT8E8M0 = 24
QUANTIZED = INTEGER_QUANTIZED | FLOAT8 | {FLOAT4}
DEQUANTIZABLE = QUANTIZED | {6}  # and int32 (the bias of QLinear models)
ROUND_MODES = ("up", "down", "nearest")


def _code(dtype: Any) -> int | None:
    try:
        return to_onnx(dtype)
    except Exception:  # (ShapeError: no ONNX type at all)
        return None


def convert(xp: Any, x: Any, dtype: Any, saturate: int = 1, round_mode: str = "up") -> Any:
    """``x`` as ``dtype`` with ONNX Cast's rules: to float8 (not e8m0) with ``saturate``,
    values beyond the largest finite one (infinities included) become it; to float8e8m0
    (a power of two) the exponent rounds by ``round_mode``; otherwise NumPy's (ml_dtypes')
    conversion, which rounds half to even.
    """
    dtype = np.dtype(dtype)
    code = _code(dtype)
    if code in FLOAT8 and saturate:
        info = type_info(dtype)
        # clamped in a float wide enough to hold the bounds (a uint8 or float8 source cannot;
        # bool becomes 0 or 1 first); NaN stays NaN through clip
        wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
        return xp.clip(wide, wide.dtype.type(info.min), wide.dtype.type(info.max)).astype(dtype)
    if code == FLOAT8E8M0:
        return _to_e8m0(xp, x, saturate, round_mode).view(dtype)
    return x.astype(dtype)


def _to_e8m0(xp: Any, x: Any, saturate: int, round_mode: str) -> Any:
    """The float8e8m0 bits of ``x``: float32's biased exponent, rounded up when the dropped
    mantissa says so (never past 254 when saturating); inf and NaN become 255 (NaN). The
    sign is dropped (the type has none)."""
    bits = x.astype(np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":  # guard bit set and (round or sticky bit, or a normal number)
        up = ((bits & 0x400000) > 0) & (((bits & 0x3FFFFF) > 0) | (exponent > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    else:
        up = xp.zeros(bits.shape, bool)
    up = up & ~special
    if saturate:
        up = up & (exponent != 0xFE)
    exponent = xp.where(special, np.uint16(0xFF), exponent + up.astype(np.uint16))
    return exponent.astype(np.uint8)


def spread(xp: Any, value: Any, shape: tuple[int, ...], axis: int, block_size: int) -> Any:
    """A scale or zero point made broadcastable against data of ``shape``."""
    if value.size == 1:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    value = xp.repeat(value, block_size, axis=axis)
    return xp.take(value, xp.arange(shape[axis]), axis=axis)


def _check_param(ctx, index: int, shape, axis: int, block_size: int) -> None:
    given = ctx.shape(index)
    name = ctx.op.input_name(index)
    if int(np.prod(given, dtype=np.int64)) == 1 and len(given) <= 1:
        return
    if not block_size:
        if len(given) != 1 or given[0] != shape[axis]:
            ctx.fail(f"{name} {given} must be one value or one per element of axis {axis} "
                     f"(length {shape[axis]})")
        return
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block_size)
    if list(given) != blocks:
        ctx.fail(f"{name} {given} must have shape {blocks}: one value per block of "
                 f"{block_size} along axis {axis}")


def _layout(ctx):
    shape = ctx.shape(0)
    block_size = ctx.attrs["block_size"]
    if block_size < 0:
        ctx.fail(f"block_size must be >= 0, got {block_size}")
    per_tensor = all(int(np.prod(ctx.shape(i), dtype=np.int64)) == 1
                     for i in (1, 2) if ctx.has(i))
    if per_tensor and not block_size:
        return shape  # (the axis is not used, and need not exist)
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    for index in (1, 2):
        if ctx.has(index):
            _check_param(ctx, index, shape, axis, block_size)
    return shape


def _output_dtype(ctx, default: np.dtype) -> np.dtype:
    code = ctx.attrs["output_dtype"]
    if not code:
        return default
    missing = low_precision_missing(code)
    if missing is not None:
        ctx.fail(f"output_dtype={code}: {missing}")
    if code not in ONNX_DTYPES:
        ctx.fail(f"output_dtype={code} is not a supported element type")
    return np.dtype(ONNX_DTYPES[code])


def _names(codes) -> list[str]:
    return [LOW_PRECISION.get(c) or ONNX_DTYPES[c].name for c in sorted(codes)]


def _dequantize_infer(ctx):
    shape = _layout(ctx)
    if _code(ctx.dtype(0)) not in DEQUANTIZABLE:
        ctx.fail(f"x must be one of {_names(DEQUANTIZABLE)}, got {ctx.dtype(0).name}")
    if not is_float(ctx.dtype(1)):
        ctx.fail(f"x_scale must be a float tensor, got {ctx.dtype(1).name}")
    if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
        ctx.fail(f"x_zero_point is {ctx.dtype(2).name}; it must be x's {ctx.dtype(0).name}")
    out = _output_dtype(ctx, ctx.dtype(1))
    if not is_float(out) or _code(out) == FLOAT8E8M0 or _code(out) in QUANTIZED:
        ctx.fail(f"the output must be float32, float16 or bfloat16, got {out.name} (give "
                 f"output_dtype when x_scale is float8e8m0)")
    return [TensorType(shape, out)]


def _quantize_infer(ctx):
    shape = _layout(ctx)
    for index in (0, 1):
        if not (is_float(ctx.dtype(index)) or ctx.dtype(index) == np.int32):
            ctx.fail(f"{ctx.op.input_name(index)} must be a float (or int32) tensor, got "
                     f"{ctx.dtype(index).name}")
    out = ctx.dtype(2) if ctx.has(2) else _output_dtype(ctx, np.dtype(np.uint8))
    if ctx.has(2) and ctx.attrs["output_dtype"] and _output_dtype(ctx, out) != out:
        ctx.fail(f"output_dtype differs from the zero point's {out.name}")
    if _code(out) not in QUANTIZED:
        ctx.fail(f"quantizing to {out.name} is not supported (one of {_names(QUANTIZED)})")
    precision = ctx.attrs["precision"]
    if precision and (low_precision_missing(precision) or precision not in ONNX_DTYPES
                      or not is_float(ONNX_DTYPES[precision])):
        ctx.fail(f"precision={precision} must be a float element type")
    return [TensorType(shape, out)]


def _dequantize_dtype(ctx):
    return [ctx.dtype(1) if not ctx.attrs["output_dtype"] else _output_dtype(ctx, None)]


def _quantize_dtype(ctx):
    # the zero point's type, else output_dtype, else uint8 (the full rule checks they agree)
    if ctx.has(2):
        return [ctx.dtype(2)]
    return [_output_dtype(ctx, np.dtype(np.uint8))]


_LAYOUT = {"axis": Attr("int", 1), "block_size": Attr("int", 0), "output_dtype": Attr("int", 0)}
declare("DequantizeLinear", inputs=("x", "x_scale", "x_zero_point?"), outputs=("y",),
        infer=_dequantize_infer, attrs=_LAYOUT, onnx_since=25, dtype_rule=_dequantize_dtype,
        widens_weights=True)
declare("QuantizeLinear", inputs=("x", "y_scale", "y_zero_point?"), outputs=("y",),
        infer=_quantize_infer, onnx_since=25, dtype_rule=_quantize_dtype,
        attrs={**_LAYOUT, "saturate": Attr("int", 1), "precision": Attr("int", 0)})


# -- portable.UnpackBits: a packed 4- or 2-bit weight, unpacked per use ----------------------


def _unpack_infer(ctx):
    code, shape = ctx.attrs["to"], tuple(ctx.attrs["shape"])
    bits = PACKED_BITS.get(code)
    if bits is None:
        ctx.fail(f"to={code} is not a packed element type (one of {sorted(PACKED_BITS)})")
    count = math.prod(shape)
    if ctx.dtype(0) != np.uint8 or ctx.shape(0) != (-(-count * bits // 8),):
        ctx.fail(f"input {ctx.type(0)!r} must hold {count} {bits}-bit values packed in "
                 f"{-(-count * bits // 8)} bytes (uint8)")
    return [TensorType(shape, from_onnx(code))]


# The weight a file stores packed (int4, uint4, float4e2m1, int2, uint2) stays packed in memory,
# half (or a quarter) of the bytes the unpacked array takes; this op unpacks it into planned
# workspace where it is used (portable/passes/pack_weights.py inserts it). Never exported: the
# exporter writes the packed weight as the tensor it was.
declare("UnpackBits", domain="portable", inputs=("packed",), outputs=("unpacked",),
        infer=_unpack_infer, attrs={"to": Attr("int"), "shape": Attr("ints")},
        dtype_rule=lambda ctx: [from_onnx(ctx.attrs["to"])], widens_weights=True)
