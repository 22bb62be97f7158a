"""NumPy kernels: convolution and pooling, written against ``ctx.xp`` (NumPy or CuPy).

Conv is one ``matmul`` call per node on an im2col copy made through one strided view, batched
over images and groups (a depthwise Conv is the case of one input channel per group: a batch
of small GEMMs, no per-channel loop); a 1x1 stride-1 unpadded Conv multiplies the input
directly. ConvTranspose and ConvGradWeight take their formulation from plans chosen by shape
(conv_grads.py). Pools and col2im walk the kernel offsets, one strided elementwise op each, and
never pad. Outputs are the planner's contiguous buffers, so reshaping them gives views the GEMM
writes into.
"""
from __future__ import annotations

import math

import numpy as np

from portable.ops.conv import Geometry, pool_geometry

from backends.xp.kernels.im2col import (clipped_offsets, input_index, lowest,
                                           padded_windows, reduce_windows, scratch,
                                           window_argmax, window_view)
from backends.xp.kernels.conv_plan import ConvPlan, is_pointwise
from backends.xp.kernels.reduce import short_trailing_sum
from backends.xp.kernels.winograd import conv_transpose2d
from backends.xp.kernels.conv_grads import GradWeightPlan, TransposePlan
from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _into(xp, y, compute) -> None:
    """Run ``compute(target)``, which writes through reshaped views of ``target``: ``y`` itself
    when it is contiguous (the planner's buffers are), else a scratch copied back."""
    target = y if y.flags.c_contiguous else xp.empty(y.shape, dtype=y.dtype)
    compute(target)
    if target is not y:
        y[...] = target


# -- Conv ----------------------------------------------------------------------------------------


def _columns(ctx, x, geom: Geometry, group: int):
    """The GEMM's right operand (N, group, C/group * prod(kernel), prod(out))."""
    n, c = x.shape[:2]
    rows = c // group * math.prod(geom.kernel)
    if is_pointwise(geom, x.shape[2:]):
        return x.reshape(n, group, rows, -1)
    cols = scratch(ctx, "columns", x.shape[:2] + geom.kernel + tuple(geom.out), x.dtype)
    cols[...] = window_view(ctx.xp, padded_windows(ctx, x, geom), geom)
    return cols.reshape(n, group, rows, -1)


def conv_forward(ctx, x, w, geom: Geometry, group: int, y) -> None:
    """Y = Conv(X, W) without bias, written into ``y``."""
    n, m = x.shape[0], w.shape[0]
    cols = _columns(ctx, x, geom, group)
    weights = w.reshape(group, m // group, cols.shape[2])
    ctx.xp.matmul(weights, cols, out=y.reshape(n, group, m // group, cols.shape[3]))


def _prepare_conv(backend, input_types, output_types, attrs) -> ConvPlan:
    return ConvPlan(backend, input_types, attrs)


@kernel("Conv", prepare=_prepare_conv)
def conv(plan: ConvPlan, ctx, inputs, outputs, attrs):
    """Conv through its plan (geometry, path and views fixed once; Winograd where it pays,
    chosen there and not in conv_forward: ConvInteger relies on that GEMM being exact)."""
    x, w = inputs[:2]
    y = outputs[0]
    if y.flags.c_contiguous:
        plan.forward(ctx, x, w, y)
    else:
        _into(ctx.xp, y, lambda target: plan.forward(ctx, x, w, target))
    if len(inputs) > 2 and inputs[2] is not None:
        y += inputs[2].reshape(plan.bias_shape)


# -- ConvTranspose and ConvGradWeight (plans in conv_grads.py) -----------------------------------


def _prepare_conv_transpose(backend, input_types, output_types, attrs) -> TransposePlan:
    return TransposePlan(backend, input_types, attrs)


@kernel("ConvTranspose", prepare=_prepare_conv_transpose)
def conv_transpose(plan: TransposePlan, ctx, inputs, outputs, attrs):
    """ConvTranspose through its plan: the formulation (col2im or, at stride 1, a Conv of the
    flipped weights; per image or batch-wide) fixed by the shapes at plan time."""
    x, w = inputs[:2]
    y = outputs[0]
    if plan.tile:  # stride 1 3x3 under PORTABLE_WINOGRAD
        _into(ctx.xp, y, lambda target: conv_transpose2d(ctx, x, w, plan.geom, plan.tile,
                                                         target))
    else:
        _into(ctx.xp, y, lambda target: plan.run(ctx, x, w, target))
    if len(inputs) > 2 and inputs[2] is not None:
        y += inputs[2].reshape(plan.bias_shape)


def _prepare_conv_grad_weight(backend, input_types, output_types, attrs) -> GradWeightPlan:
    return GradWeightPlan(backend, input_types, attrs)


@kernel("portable.ConvGradWeight", prepare=_prepare_conv_grad_weight)
def conv_grad_weight(plan: GradWeightPlan, ctx, inputs, outputs, attrs):
    """dW = dY (M, N * out) @ columns(X)^T (N * out, C/group * kernel), per group: one GEMM
    that sums over images and windows together."""
    x, dy = inputs
    _into(ctx.xp, outputs[0], lambda dw: plan.run(ctx, x, dy, dw))


# -- pooling -------------------------------------------------------------------------------------


@kernel("MaxPool")
def max_pool(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = inputs[0], outputs[0]
    geom = pool_geometry(x.shape[2:], attrs)
    if len(outputs) > 1 and outputs[1] is not None:
        arg = window_argmax(xp, padded_windows(ctx, x, geom, lowest(x.dtype)), geom, y)
        outputs[1][...] = input_index(xp, arg, geom, x.shape, bool(attrs["storage_order"]))
        return
    reduce_windows(xp, x, geom, y, xp.maximum, lowest(x.dtype))


@kernel("portable.MaxPoolGrad")
def max_pool_grad(ctx, inputs, outputs, attrs):
    """Each window's gradient goes to its first maximum; overlapping windows add up, which a
    weighted bincount over the flat input indices does in one pass."""
    xp = ctx.xp
    dy, x = inputs
    dx = outputs[0]
    geom = pool_geometry(x.shape[2:], attrs)
    padded = padded_windows(ctx, x, geom, lowest(x.dtype))
    arg = window_argmax(xp, padded, geom, xp.empty(dy.shape, dtype=x.dtype))
    index = input_index(xp, arg, geom, x.shape).reshape(-1)
    weights = xp.where(index >= 0, dy.reshape(-1), 0)
    total = xp.bincount(xp.maximum(index, 0), weights=weights, minlength=dx.size)
    dx[...] = total.reshape(dx.shape)


def _pool_divisor(xp, geom: Geometry, in_shape, include_pad: bool, dtype):
    """How many elements each AveragePool window averages, shaped (*out) to broadcast. Windows
    are boxes, so the count is the product of per-axis counts. Explicit and auto pads count
    when ``include_pad``; the extra reach of ceil_mode never does."""
    total = np.ones((), np.int64)
    for i, n in enumerate(in_shape):
        starts = np.arange(geom.out[i]) * geom.strides[i] - geom.head[i]
        pos = starts[:, None] + np.arange(geom.kernel[i]) * geom.dilations[i]
        low, high = (-geom.head[i], n + geom.tail[i]) if include_pad else (0, n)
        count = ((pos >= low) & (pos < high)).sum(axis=1)
        total = np.multiply.outer(total, count)
    return xp.asarray(total, dtype=dtype)


@kernel("AveragePool")
def average_pool(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = inputs[0], outputs[0]
    geom = pool_geometry(x.shape[2:], attrs)
    reduce_windows(xp, x, geom, y, xp.add, 0)
    y /= _pool_divisor(xp, geom, x.shape[2:], bool(attrs["count_include_pad"]), y.dtype)


@kernel("portable.AveragePoolGrad")
def average_pool_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    dy, x = inputs
    dx = outputs[0]
    in_shape = dx.shape[2:]
    geom = pool_geometry(in_shape, attrs)
    share = dy / _pool_divisor(xp, geom, in_shape, bool(attrs["count_include_pad"]), dy.dtype)
    dx[...] = 0
    for _, windows, index in clipped_offsets(geom, geom.out, in_shape):
        dx[index] += share[windows]


# Plane sizes up to which GlobalAveragePool sums each plane as a matrix-vector product with a
# ones vector. NumPy's mean over (2, 3) of (1, 1000, 13, 13) took 71 us (0.16-0.22 ms inside
# SqueezeNet), gemv 20 us. gemv's vector lanes each keep a running sum of up to 1024 / 8
# terms, so a mean is off by at most ~128 float32 roundings (NumPy's pairwise sums, ~10):
# well inside a float32 model's tolerance; larger planes stay with NumPy.
GLOBAL_POOL_GEMV = 1024


@kernel("GlobalAveragePool")
def global_average_pool(ctx, inputs, outputs, attrs):
    """The mean of each plane; a plane of up to ``GLOBAL_POOL_GEMV`` elements as a
    matrix-vector product with a ones vector, then a division by the count (see
    ``short_trailing_sum``)."""
    xp, x, y = ctx.xp, inputs[0], outputs[0]
    axes = tuple(range(2, x.ndim))
    count = short_trailing_sum(xp, x, axes, y, GLOBAL_POOL_GEMV)
    if count:
        xp.divide(y, count, out=y)
    else:
        xp.mean(x, axis=axes, keepdims=True, out=y)


@kernel("GlobalMaxPool")
def global_max_pool(ctx, inputs, outputs, attrs):
    x = inputs[0]
    ctx.xp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=outputs[0])
