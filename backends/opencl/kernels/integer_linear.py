"""OpenCL kernels of the integer-quantized linear ops: MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv and DynamicQuantizeLinear.

The operands, shifted by their zero points, are int32 on the device, and the products go
through the packed GEMM (and Conv's im2col / direct kernels) in int32: exact, wrapping as the
int32 accumulation ONNX specifies. Scales and zero points are a handful of values: they are
read on the host and the requantization multiplier is computed there with NumPy, in the
scales' dtype as onnx.reference does; the requantization itself (multiply, add the zero point,
round half to even, saturate) runs elementwise on the device in float64, or in float32 on a
device without cl_khr_fp64 (a product that lands within float32 rounding of a .5 tie may then
round to the neighbouring level).
"""
from __future__ import annotations

import numpy as np

from portable.ops.conv import window_geometry
from portable.ops.integer_linear import (channel_param, column_param, dynamic_quantize_params,
                                         output_channel_param, row_param)

from backends.opencl.allocator import empty, host_value
from backends.opencl.arrayops import matmul
from backends.opencl.elementwise import apply, assign
from backends.opencl.kernels.conv import conv_forward
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.window import Window

kernels, kernel = kernel_table()


def _host(value):
    return None if value is None else np.asarray(host_value(value))


def _operand(value: np.ndarray, dtype):
    """A host parameter as an elementwise operand: a scalar of ``dtype`` or an array."""
    return value.astype(dtype) if value.ndim else np.dtype(dtype).type(value)


def _shifted(x, zero, layout):
    """``x - zero_point`` as int32 on the device."""
    wide = apply("Cast", x, dtype=np.int32)
    if zero is None:
        return wide
    return apply("Sub", wide, _operand(layout(_host(zero).astype(np.int32)), np.int32))


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


def _matmul_acc(a, a_zero, b, b_zero, out=None):
    a32 = _shifted(a, a_zero, lambda v: row_param(v, a.ndim))
    b32 = _shifted(b, b_zero, column_param)
    return matmul(a32, b32, out)


def _conv_acc(ctx, x, x_zero, w, w_zero, bias, attrs, out=None):
    """The int32 convolution of the shifted operands (+ bias): padding reads 0, the zero point
    before the shift."""
    x32 = _shifted(x, x_zero, lambda v: v.reshape(()))
    w32 = _shifted(w, w_zero, lambda v: channel_param(v, w.ndim))
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    acc = out if out is not None else empty(x.runtime, (x.shape[0], w.shape[0]) + geom.out,
                                            np.int32)
    conv_forward(x32, w32, bias, Window.of(geom, x.shape[2:]), attrs["group"], acc, ctx)
    return acc


def _requantize(acc, multiplier: np.ndarray, zero, out) -> None:
    """out = saturate(round_half_to_even(acc * multiplier + zero)) (onnx.reference's order)."""
    wide = np.float64 if acc.runtime.device.fp64 else np.float32
    levels = apply("Mul", apply("Cast", acc, dtype=wide), _operand(multiplier, wide))
    levels = apply("Round", apply("Add", levels, _operand(_host(zero).reshape(()), wide)))
    info = np.iinfo(out.dtype)
    assign(out, apply("Min", apply("Max", levels, float(info.min)), float(info.max)))


@kernel("MatMulInteger")
def matmul_integer(ctx, inputs, outputs, attrs):
    _matmul_acc(inputs[0], _optional(inputs, 2), inputs[1], _optional(inputs, 3), outputs[0])


@kernel("QLinearMatMul")
def qlinear_matmul(ctx, inputs, outputs, attrs):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
    acc = _matmul_acc(a, a_zero, b, b_zero)
    multiplier = (row_param(_host(a_scale), a.ndim) * column_param(_host(b_scale))
                  / _host(y_scale).reshape(()))
    _requantize(acc, multiplier, y_zero, outputs[0])


@kernel("ConvInteger")
def conv_integer(ctx, inputs, outputs, attrs):
    _conv_acc(ctx, inputs[0], _optional(inputs, 2), inputs[1], _optional(inputs, 3), None,
              attrs, outputs[0])


@kernel("QLinearConv")
def qlinear_conv(ctx, inputs, outputs, attrs):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = inputs[:8]
    acc = _conv_acc(ctx, x, x_zero, w, w_zero, _optional(inputs, 8), attrs)
    multiplier = (_host(x_scale).reshape(()) * output_channel_param(_host(w_scale), acc.ndim)
                  / _host(y_scale).reshape(()))
    _requantize(acc, multiplier, y_zero, outputs[0])


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, inputs, outputs, attrs):
    x = inputs[0]
    y, scale_out, zero_out = outputs
    xp = ctx.backend.xp
    # the range is two values read back to the host, where the parameters are computed
    low = float(np.asarray(host_value(xp.min(x)))) if x.size else 0.0
    high = float(np.asarray(host_value(xp.max(x)))) if x.size else 0.0
    scale, zero = dynamic_quantize_params(low, high)
    levels = apply("Add", apply("Round", apply("Div", x, scale)), zero)
    assign(y, apply("Min", apply("Max", levels, 0.0), 255.0))
    assign(scale_out, np.asarray(scale, np.float32))
    assign(zero_out, np.asarray(zero, np.float32).astype(np.uint8))
