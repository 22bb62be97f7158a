"""NumPy kernels: QuantizeLinear and DequantizeLinear, for every quantized type (ml_dtypes'
4- and 2-bit integers, float8 and float4 included), following onnx's reference: integers round
half to even then saturate to the type's range; float8 adds no zero point and saturates when
asked; float4 (no inf or NaN) always saturates."""
from __future__ import annotations

import numpy as np

from portable.dtypes import from_onnx, is_integer, to_onnx, type_info
from portable.ops.quantize import FLOAT8, convert, spread

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _params(ctx, inputs, attrs, shape):
    axis = attrs["axis"] % max(len(shape), 1)  # (used only for per-axis or blocked values)
    scale = spread(ctx.xp, inputs[1], shape, axis, attrs["block_size"])
    zero = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if zero is not None:
        zero = spread(ctx.xp, zero, shape, axis, attrs["block_size"])
    return scale, zero


@kernel("DequantizeLinear")
def dequantize_linear(ctx, inputs, outputs, attrs):
    x = inputs[0]
    scale, zero = _params(ctx, inputs, attrs, x.shape)
    centred = x.astype(np.float32)
    if zero is not None and is_integer(x.dtype):  # (float8 and float4 zero points are 0)
        centred = centred - zero.astype(np.float32)
    outputs[0][...] = centred * scale


@kernel("QuantizeLinear")
def quantize_linear(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    scale, zero = _params(ctx, inputs, attrs, x.shape)
    if attrs["precision"]:
        precision = from_onnx(attrs["precision"])
        scaled = x.astype(precision) / scale.astype(precision)
    else:
        scaled = x / scale
    if is_integer(out.dtype):
        levels = xp.rint(scaled).astype(np.int32)  # half to even
        if zero is not None:
            levels += zero.astype(np.int32)
        info = type_info(out.dtype)
        out[...] = xp.clip(levels, int(info.min), int(info.max)).astype(out.dtype)
    elif to_onnx(out.dtype) in FLOAT8:
        out[...] = convert(xp, scaled, out.dtype, attrs["saturate"])
    else:  # float4e2m1: the cast saturates by itself
        out[...] = (scaled if zero is None else scaled + zero).astype(out.dtype)
