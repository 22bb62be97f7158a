"""NumPy kernels: QuantizeLinear and DequantizeLinear, for every quantized type (ml_dtypes'
4- and 2-bit integers, float8 and float4 included), following onnx's reference: integers round
half to even then saturate to the type's range; float8 adds no zero point and saturates when
asked; float4 (no inf or NaN) always saturates."""
from __future__ import annotations

import numpy as np

from portable.dtypes import PACKED_BITS, from_onnx, is_integer, to_onnx, type_info
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


def _apply_in_place(xp, ufunc, out, value, axis: int, block_size: int) -> None:
    """``out = ufunc(out, value)`` with ``value`` one number, one per element of ``axis`` or one
    per block of ``block_size`` along it, through broadcast views: a weight dequantized per use
    costs no temporary of its own size (only a short last block is spread out)."""
    if value.size == 1:
        ufunc(out, value.reshape(()), out=out)
        return
    if not block_size or out.shape[axis] % block_size:
        ufunc(out, spread(xp, value, out.shape, axis, block_size), out=out)
        return
    blocks = out.shape[axis] // block_size
    shaped = out.reshape(out.shape[:axis] + (blocks, block_size) + out.shape[axis + 1:])
    ufunc(shaped, value.reshape(value.shape[:axis] + (blocks, 1) + value.shape[axis + 1:]),
          out=shaped)


@kernel("DequantizeLinear")
def dequantize_linear(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    axis = attrs["axis"] % max(x.ndim, 1)
    # into the output first, then centred and scaled there: with a weight of int8 or int4 and a
    # float32 output, the output is the only array of the widened size
    compute = out if out.dtype.itemsize >= 4 and out.flags.c_contiguous else \
        xp.empty(out.shape, np.float32)
    compute[...] = x  # (converted as it is copied, a buffer at a time)
    zero = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if zero is not None and is_integer(x.dtype):  # (float8 and float4 zero points are 0)
        _apply_in_place(xp, xp.subtract, compute, zero.astype(compute.dtype), axis,
                        attrs["block_size"])
    _apply_in_place(xp, xp.multiply, compute, inputs[1].astype(compute.dtype), axis,
                    attrs["block_size"])
    if compute is not out:
        out[...] = compute


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


@kernel("portable.UnpackBits")
def unpack_bits_kernel(ctx, inputs, outputs, attrs):
    # (portable.dtypes.unpack_bits, over the array namespace)
    xp, out = ctx.xp, outputs[0]
    bits = PACKED_BITS[attrs["to"]]
    shifts = xp.arange(0, 8, bits, dtype=xp.uint8)
    patterns = (inputs[0][:, None] >> shifts) & xp.uint8((1 << bits) - 1)
    out.reshape(-1).view(xp.uint8)[...] = patterns.reshape(-1)[:out.size]
