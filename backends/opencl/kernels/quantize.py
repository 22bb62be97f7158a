"""OpenCL kernels: QuantizeLinear and DequantizeLinear, as generated elementwise steps.

The scale and zero point are small host-side values spread to a broadcastable shape (per
tensor, per axis, blocked) and uploaded; the arithmetic is the elementwise op table's.
The 8- and 16-bit integer types run here; ml_dtypes' types (int4, float8, bfloat16...) have no
OpenCL C type: a plan holding one is refused before it runs (``OpenCLBackend.dtype_problem``),
naming the tensor, unless its DequantizeLinear was folded on the host (constant weights).
"""
from __future__ import annotations

import numpy as np

from portable.ops.quantize import spread

from backends.opencl.allocator import host_value
from backends.opencl.elementwise import apply, assign
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _params(inputs, attrs, shape):
    """The scale and the zero point (None when absent), spread on the host."""
    axis = attrs["axis"] % max(len(shape), 1)  # (used only for per-axis or blocked values)
    return [None if len(inputs) <= index or inputs[index] is None else
            spread(np, np.asarray(host_value(inputs[index])), shape, axis, attrs["block_size"])
            for index in (1, 2)]


def _as(value, dtype):
    """A spread value as an array (uploaded when used) or a scalar of ``dtype``."""
    return value.astype(dtype) if value.ndim else np.dtype(dtype).type(value)


@kernel("DequantizeLinear")
def dequantize_linear(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    scale, zero = _params(inputs, attrs, x.shape)
    centred = apply("Cast", x, dtype=np.float32)
    if zero is not None:
        centred = apply("Sub", centred, _as(zero, np.float32))
    apply("Mul", centred, _as(scale, out.dtype), out=out)


@kernel("QuantizeLinear")
def quantize_linear(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    scale, zero = _params(inputs, attrs, x.shape)
    levels = apply("Round", apply("Div", x, _as(scale, x.dtype)))  # half to even
    if zero is not None:
        levels = apply("Add", levels, _as(zero, x.dtype))
    info = np.iinfo(out.dtype)
    assign(out, apply("Min", apply("Max", levels, float(info.min)), float(info.max)))
