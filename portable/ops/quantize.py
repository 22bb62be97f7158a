"""Linear quantization: QuantizeLinear and DequantizeLinear (ONNX's int8 / int16 model format).

``DequantizeLinear``: ``y = (x - zero_point) * scale``; ``QuantizeLinear``:
``y = saturate(round_half_to_even(x / scale) + zero_point)``. The scale and zero point are one
value (per tensor), a vector along ``axis`` (per axis), or, with ``block_size``, one value per
block of ``block_size`` elements along ``axis`` (blocked). Not differentiable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import ONNX_DTYPES
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import normalize_axis

QUANTIZED = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16))
DEQUANTIZABLE = QUANTIZED + (np.dtype(np.int32),)


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
    if code not in ONNX_DTYPES:
        ctx.fail(f"output_dtype={code} is not a supported element type")
    return np.dtype(ONNX_DTYPES[code])


def _dequantize_infer(ctx):
    shape = _layout(ctx)
    if ctx.dtype(0) not in DEQUANTIZABLE:
        ctx.fail(f"x must be one of {[d.name for d in DEQUANTIZABLE]}, got {ctx.dtype(0).name}")
    if ctx.dtype(1).kind != "f":
        ctx.fail(f"x_scale must be a float tensor, got {ctx.dtype(1).name}")
    if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
        ctx.fail(f"x_zero_point is {ctx.dtype(2).name}; it must be x's {ctx.dtype(0).name}")
    return [TensorType(shape, _output_dtype(ctx, ctx.dtype(1)))]


def _quantize_infer(ctx):
    shape = _layout(ctx)
    if ctx.dtype(0).kind != "f" or ctx.dtype(1).kind != "f":
        ctx.fail(f"x and y_scale must be float tensors, got {ctx.dtype(0).name} and "
                 f"{ctx.dtype(1).name}")
    out = ctx.dtype(2) if ctx.has(2) else _output_dtype(ctx, np.dtype(np.uint8))
    if ctx.has(2) and ctx.attrs["output_dtype"] and _output_dtype(ctx, out) != out:
        ctx.fail(f"output_dtype differs from the zero point's {out.name}")
    if out not in QUANTIZED:
        ctx.fail(f"quantizing to {out.name} is not supported (one of "
                 f"{[d.name for d in QUANTIZED]})")
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
        infer=_dequantize_infer, attrs=_LAYOUT, onnx_since=25, dtype_rule=_dequantize_dtype)
declare("QuantizeLinear", inputs=("x", "y_scale", "y_zero_point?"), outputs=("y",),
        infer=_quantize_infer, onnx_since=25, dtype_rule=_quantize_dtype,
        attrs={**_LAYOUT, "saturate": Attr("int", 1), "precision": Attr("int", 0)})
