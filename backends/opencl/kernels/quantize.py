"""OpenCL kernels: QuantizeLinear and DequantizeLinear, for every quantized type (the 8- and
16-bit integers, ml_dtypes' 4- and 2-bit integers, float8 and float4), following the NumPy
kernels (``backends/xp/kernels/quantize.py``), themselves onnx's reference.

The scale and zero point are small host-side values spread to a broadcastable shape (per
tensor, per axis, blocked) and uploaded; the arithmetic is the elementwise op table's, in
float32 for the storage formats (bfloat16 values are rounded back to bfloat16 where NumPy's
bfloat16 arithmetic would round them), and the final store is ``convert`` (ONNX Cast's rules:
float8 saturation).
"""
from __future__ import annotations

import numpy as np

from portable.dtypes import (PACKED_BITS, from_onnx, is_integer, is_low_precision, to_onnx,
                             type_info)
from portable.ops.quantize import FLOAT8, spread

from backends.opencl.allocator import CLArray, host_value
from backends.opencl.convert import convert
from backends.opencl.elementwise import apply, assign
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()

_F32 = np.dtype(np.float32)


def _params(inputs, attrs, shape):
    """The scale and the zero point (None when absent), spread on the host."""
    axis = attrs["axis"] % max(len(shape), 1)  # (used only for per-axis or blocked values)
    return [None if len(inputs) <= index or inputs[index] is None else
            spread(np, np.asarray(host_value(inputs[index])), shape, axis, attrs["block_size"])
            for index in (1, 2)]


def _working(dtype) -> np.dtype:
    """The type arithmetic on ``dtype`` runs in: float32 for the storage formats."""
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _as(value, dtype):
    """A spread host value converted to ``dtype`` (rounded there), as an array in its
    working type (uploaded when used) or a scalar."""
    value = value.astype(dtype).astype(_working(dtype))
    return value if value.ndim else value[()]


def _rounded(x, dtype):
    """Device array ``x``'s values rounded to ``dtype``, held in its working type."""
    if x.dtype != dtype:
        x = x.astype(dtype)
    working = _working(dtype)
    return x if x.dtype == working else x.astype(working)


@kernel("DequantizeLinear", half="storage")
def dequantize_linear(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    scale, zero = _params(inputs, attrs, x.shape)
    centred = apply("Cast", x, dtype=_F32)
    if zero is not None and is_integer(x.dtype):  # (float8 and float4 zero points are 0)
        centred = apply("Sub", centred, _as(zero, _F32))
    # float32 * the scale's type is float32 in NumPy (ml_dtypes' types promote to it), then
    # stored into the output's type
    apply("Mul", centred, _as(scale, _F32 if is_low_precision(scale.dtype) else scale.dtype),
          out=out)


@kernel("QuantizeLinear", half="storage")
def quantize_linear(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    scale, zero = _params(inputs, attrs, x.shape)
    # x / scale in the precision asked for, else in NumPy's promotion of the two types
    precision = (from_onnx(attrs["precision"]) if attrs["precision"]
                 else np.result_type(x.dtype, scale.dtype))
    scaled = _rounded(apply("Div", _rounded(x, precision), _as(scale, precision)), precision)
    if is_integer(out.dtype):
        # rounded half to even, then in int32 (as NumPy's): the zero point, the type's range
        levels = apply("Cast", apply("Round", scaled), dtype=np.int32)
        if zero is not None:
            levels = apply("Add", levels, _as(zero, np.int32))
        info = type_info(out.dtype)
        low, high = np.int32(info.min), np.int32(info.max)
        convert(apply("Min", apply("Max", levels, low), high), out)
    elif to_onnx(out.dtype) in FLOAT8:
        convert(scaled, out, attrs["saturate"])
    else:  # float4e2m1: the cast saturates by itself
        convert(scaled if zero is None else apply("Add", scaled, _as(zero, scaled.dtype)), out)


@kernel("portable.UnpackBits", half="storage")
def unpack_bits(ctx, inputs, outputs, attrs):
    # (portable.dtypes.unpack_bits: 8 // bits values a byte, the first in the low bits) Each
    # value's bit pattern is its byte in memory, as ml_dtypes holds it: written as uint8.
    packed, out = inputs[0], outputs[0]
    bits = PACKED_BITS[attrs["to"]]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    patterns = apply("BitwiseAnd", apply("BitShiftRight", packed.reshape(-1, 1), shifts),
                     np.uint8((1 << bits) - 1))
    target = CLArray(out.runtime, out.buffer, out.shape, np.uint8, out.strides, out.offset)
    assign(target, patterns.reshape(-1)[:out.size].reshape(out.shape))
