"""NumPy kernels of the integer-quantized linear ops, written against ``ctx.xp``.

The integer products accumulate in float64, whose BLAS GEMM (and the im2col convolution of
``conv.conv_forward``) is fast where an integer matmul is not, and which is exact here: a term
is at most 255 * 255 < 2^16, so sums of up to 2^37 terms stay below 2^53. The int32 result
then wraps as int32 accumulation would. Requantizing follows onnx.reference: the multiplier
``a_scale * b_scale / y_scale`` in the scales' own dtype, the product in float64, then round
the zero point, round half to even and saturate.
"""
from __future__ import annotations

import numpy as np

from portable.ops.conv import window_geometry
from portable.ops.integer_linear import (channel_param, column_param, dynamic_quantize_params,
                                         output_channel_param, row_param)

from backends.xp.kernels.conv import conv_forward
from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _shifted(x, zero, shape_param):
    """``x - zero_point`` as float64 (exact), with the zero point broadcast as its layout
    says."""
    wide = x.astype(np.float64)
    return wide if zero is None else wide - shape_param(zero).astype(np.float64)


def _wrapped(xp, acc):
    """A float64 accumulator (exact integers) as int32, wrapping as int32 sums do."""
    return acc.astype(np.int64).astype(np.int32)


def _matmul_acc(ctx, a, a_zero, b, b_zero):
    a = _shifted(a, a_zero, lambda v: row_param(v, a.ndim))
    b = _shifted(b, b_zero, column_param)
    return ctx.xp.matmul(a, b)


def _conv_acc(ctx, x, x_zero, w, w_zero, attrs):
    """The convolution of the shifted operands (padding reads 0: the zero point before the
    shift), through Conv's im2col GEMM."""
    xp = ctx.xp
    x = _shifted(x, x_zero, lambda v: v.reshape(()))
    w = _shifted(w, w_zero, lambda v: channel_param(v, w.ndim))
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    acc = xp.empty((x.shape[0], w.shape[0]) + tuple(geom.out), np.float64)
    conv_forward(ctx, xp.ascontiguousarray(x), xp.ascontiguousarray(w), geom, attrs["group"],
                 acc)
    return acc


def _requantize(xp, acc, multiplier, zero, out) -> None:
    """out = saturate(round_half_to_even(acc * multiplier + zero)): onnx.reference adds the
    zero point before rounding (a tie rounds to the even level, not the even product)."""
    info = np.iinfo(out.dtype)
    levels = xp.rint(acc * multiplier.astype(np.float64) + zero.astype(np.float64))
    out[...] = xp.clip(levels, info.min, info.max).astype(out.dtype)


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


@kernel("MatMulInteger")
def matmul_integer(ctx, inputs, outputs, attrs):
    a, b = inputs[:2]
    acc = _matmul_acc(ctx, a, _optional(inputs, 2), b, _optional(inputs, 3))
    outputs[0][...] = _wrapped(ctx.xp, acc)


@kernel("QLinearMatMul")
def qlinear_matmul(ctx, inputs, outputs, attrs):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
    acc = _wrapped(ctx.xp, _matmul_acc(ctx, a, a_zero, b, b_zero)).astype(np.float64)
    multiplier = row_param(a_scale, a.ndim) * column_param(b_scale) / y_scale.reshape(())
    _requantize(ctx.xp, acc, multiplier, y_zero.reshape(()), outputs[0])


@kernel("ConvInteger")
def conv_integer(ctx, inputs, outputs, attrs):
    x, w = inputs[:2]
    acc = _conv_acc(ctx, x, _optional(inputs, 2), w, _optional(inputs, 3), attrs)
    outputs[0][...] = _wrapped(ctx.xp, acc)


@kernel("QLinearConv")
def qlinear_conv(ctx, inputs, outputs, attrs):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = inputs[:8]
    bias = _optional(inputs, 8)
    acc = _conv_acc(ctx, x, x_zero, w, w_zero, attrs)
    if bias is not None:
        acc += output_channel_param(bias, acc.ndim).astype(np.float64)
    acc = _wrapped(ctx.xp, acc).astype(np.float64)
    multiplier = (x_scale.reshape(()) * output_channel_param(w_scale, acc.ndim)
                  / y_scale.reshape(()))
    _requantize(ctx.xp, acc, multiplier, y_zero.reshape(()), outputs[0])


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    y, scale_out, zero_out = outputs
    low = float(xp.min(x)) if x.size else 0.0
    high = float(xp.max(x)) if x.size else 0.0
    scale, zero = dynamic_quantize_params(low, high)
    y[...] = xp.clip(xp.rint(x / scale) + zero, 0, 255).astype(np.uint8)
    scale_out[...] = scale
    zero_out[...] = zero.astype(np.uint8)
