"""NumPy kernels: QuantizeLinear and DequantizeLinear."""
from __future__ import annotations

import numpy as np

from portable.ops.quantize import spread

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
    centred = x.astype(np.float32) if zero is None else \
        x.astype(np.float32) - zero.astype(np.float32)
    outputs[0][...] = centred * scale


@kernel("QuantizeLinear")
def quantize_linear(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    scale, zero = _params(ctx, inputs, attrs, x.shape)
    levels = xp.rint(x / scale).astype(np.int32)  # half to even
    if zero is not None:
        levels += zero.astype(np.int32)
    info = np.iinfo(out.dtype)
    out[...] = xp.clip(levels, info.min, info.max)
