"""Compiled depthwise convolution, 2-D NCHW, and the two ops its gradient is made of.

A depthwise Conv has one input channel per group (group == C_in > 1, W of shape (M, 1, kh, kw),
M = C_in * multiplier): output channel m reads input channel m // multiplier only. The xp kernel
runs it as a batch of tiny GEMMs on an im2col copy; here each output plane is a sum over kernel
offsets of a weight times a shifted input row, an inner loop with no bounds test that LLVM
vectorises (stride 1) and no copy at all.

Its input gradient is ConvTranspose(dY, W, group=C) with W's second axis 1 (each output channel
gathers its multiplier input channels), its weight gradient portable.ConvGradWeight(X, dY,
group=C) with one X channel per group: both have a loop here too.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.support import (JIT, contiguous, floats, override, parallel, span,
                                        window_tuple)
from backends.xp.kernels.conv import conv as xp_conv
from backends.xp.kernels.conv import conv_grad_weight as xp_conv_grad_weight
from backends.xp.kernels.conv import conv_transpose as xp_conv_transpose
from portable.ops.conv import (Geometry, transpose_geometry, window_attrs, window_geometry)


@numba.njit(**JIT)
def _conv_plane(x, w, bias, y, g):
    """y (rows, cols) = bias + the correlation of plane x with kernel w (kh, kw). The kernel
    offset is the outer loop: its weight, row range and column run are fixed across the
    plane (1.5-2x faster than visiting the offsets inside each output row)."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    height, width = x.shape
    rows, cols = y.shape
    y[:, :] = bias
    for jh in range(kh):
        top = jh * dh - ph
        oh_lo, oh_hi = span(top, sh, rows, height)
        for jw in range(kw):
            start = jw * dw - pw
            lo, hi = span(start, sw, cols, width)
            weight = w[jh, jw]
            for oh in range(oh_lo, oh_hi):
                out, row = y[oh], x[np.uint64(oh * sh + top)]
                for ow in range(lo, hi):
                    out[np.uint64(ow)] += weight * row[np.uint64(ow * sw + start)]


@numba.njit(**JIT)
def conv_serial(x, w, bias, y, g):
    n, m = y.shape[:2]
    multiplier = m // x.shape[1]
    for p in range(n * m):
        i, o = p // m, p % m
        _conv_plane(x[i, o // multiplier], w[o], bias[o], y[i, o], g)


@numba.njit(parallel=True, **JIT)
def conv_parallel(x, w, bias, y, g):
    n, m = y.shape[:2]
    multiplier = m // x.shape[1]
    for p in numba.prange(n * m):
        i, o = p // m, p % m
        _conv_plane(x[i, o // multiplier], w[o], bias[o], y[i, o], g)


@numba.njit(**JIT)
def _scatter_plane(x, w, y, g):
    """y (rows, cols) += every element of plane x times kernel w, placed where the Conv with
    geometry ``g`` reads it: the adjoint of ``_conv_plane``."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    rows, cols = y.shape
    height, width = x.shape
    for jh in range(kh):
        top = jh * dh - ph
        ih_lo, ih_hi = span(top, sh, height, rows)
        for jw in range(kw):
            start = jw * dw - pw
            lo, hi = span(start, sw, width, cols)
            weight = w[jh, jw]
            for ih in range(ih_lo, ih_hi):
                out, row = y[np.uint64(ih * sh + top)], x[ih]
                for iw in range(lo, hi):
                    out[np.uint64(iw * sw + start)] += weight * row[np.uint64(iw)]


@numba.njit(**JIT)
def _transpose_planes(x, w, bias, y, p, g):
    n, c = y.shape[:2]
    multiplier = x.shape[1] // c
    i, o = p // c, p % c
    y[i, o] = bias[o]
    for k in range(o * multiplier, (o + 1) * multiplier):
        _scatter_plane(x[i, k], w[k], y[i, o], g)


@numba.njit(**JIT)
def conv_transpose_serial(x, w, bias, y, g):
    for p in range(y.shape[0] * y.shape[1]):
        _transpose_planes(x, w, bias, y, p, g)


@numba.njit(parallel=True, **JIT)
def conv_transpose_parallel(x, w, bias, y, g):
    for p in numba.prange(y.shape[0] * y.shape[1]):
        _transpose_planes(x, w, bias, y, p, g)


@numba.njit(**JIT)
def _weight_grad(x, dy, dw, o, g):
    """dw[o] (kh, kw) = sum over images and windows of dY[:, o] times the X elements each
    kernel offset reads (X's channel o // multiplier)."""
    kh, kw, sh, sw, dh, ddw, ph, pw = g
    n, m, rows, cols = dy.shape
    height, width = x.shape[2:]
    c = o // (m // x.shape[1])
    # Products are summed per output column first: independent adds that vectorise, where
    # one running total would be a chain of dependent adds.
    columns = np.empty(cols, dy.dtype)
    for jh in range(kh):
        top = jh * dh - ph
        oh_lo, oh_hi = span(top, sh, rows, height)
        for jw in range(kw):
            start = jw * ddw - pw
            lo, hi = span(start, sw, cols, width)
            columns[:] = 0
            for i in range(n):
                for oh in range(oh_lo, oh_hi):
                    grad, row = dy[i, o, oh], x[i, c, np.uint64(oh * sh + top)]
                    for ow in range(lo, hi):
                        columns[np.uint64(ow)] += (grad[np.uint64(ow)]
                                                   * row[np.uint64(ow * sw + start)])
            dw[o, jh, jw] = columns.sum()


@numba.njit(**JIT)
def conv_grad_weight_serial(x, dy, dw, g):
    for o in range(dy.shape[1]):
        _weight_grad(x, dy, dw, o, g)


@numba.njit(parallel=True, **JIT)
def conv_grad_weight_parallel(x, dy, dw, g):
    for o in numba.prange(dy.shape[1]):
        _weight_grad(x, dy, dw, o, g)


def _kernels(w):
    """(M, 1, kh, kw) -> (M, kh, kw), a view of the contiguous array."""
    return w.reshape((w.shape[0],) + w.shape[2:])


def _bias(inputs, channels: int, dtype):
    bias = inputs[2] if len(inputs) > 2 else None
    return np.zeros(channels, dtype) if bias is None else bias


def _with_bias(input_types) -> bool:
    return len(input_types) > 2 and input_types[2] is not None


def _prepare_conv(input_types, output_types, attrs):
    """One X channel per group (group == C > 1), W (M, 1, kh, kw)."""
    x, w, y = input_types[0], input_types[1], output_types[0]
    group = attrs["group"]
    bias = input_types[2] if _with_bias(input_types) else None
    if not (floats(x, w, y) and (bias is None or bias.dtype == x.dtype)
            and group > 1 and x.shape[1] == group and w.shape[1] == 1
            and w.shape[0] % group == 0):
        return None
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    planes = y.shape[0] * y.shape[1]
    work = planes * geom.out[0] * geom.out[1] * geom.kernel[0] * geom.kernel[1]
    return (conv_parallel if parallel(planes, work) else conv_serial), window_tuple(geom)


@override(xp_conv, _prepare_conv)
def conv(state, ctx, inputs, outputs, attrs) -> bool:
    x, w = inputs[:2]
    y = outputs[0]
    bias = _bias(inputs, w.shape[0], x.dtype)
    if not contiguous(x, w, y, bias):
        return False
    run, g = state
    run(x, _kernels(w), bias, y, g)
    return True


def _prepare_conv_transpose(input_types, output_types, attrs):
    """Depthwise in the sense of the Conv gradient: group == Y's channels > 1, W (X's
    channels, 1, kh, kw)."""
    x, w, y = input_types[0], input_types[1], output_types[0]
    group = attrs["group"]
    bias = input_types[2] if _with_bias(input_types) else None
    if not (floats(x, w, y) and (bias is None or bias.dtype == x.dtype)
            and group > 1 and y.shape[1] == group and w.shape[1] == 1
            and x.shape[1] % group == 0):
        return None
    geom = transpose_geometry(x.shape[2:], w.shape[2:], attrs)
    planes = y.shape[0] * y.shape[1]
    work = x.shape[0] * x.shape[1] * x.shape[2] * x.shape[3] * geom.kernel[0] * geom.kernel[1]
    run = conv_transpose_parallel if parallel(planes, work) else conv_transpose_serial
    return run, window_tuple(geom)


@override(xp_conv_transpose, _prepare_conv_transpose)
def conv_transpose(state, ctx, inputs, outputs, attrs) -> bool:
    x, w = inputs[:2]
    y = outputs[0]
    bias = _bias(inputs, y.shape[1], x.dtype)
    if not contiguous(x, w, y, bias):
        return False
    run, g = state
    run(x, _kernels(w), bias, y, g)
    return True


def _prepare_conv_grad_weight(input_types, output_types, attrs):
    """One X channel per group (group == C > 1), dW (M, 1, kh, kw)."""
    x, dy, dw = input_types[0], input_types[1], output_types[0]
    group = attrs["group"]
    if not (floats(x, dy, dw) and group > 1 and x.shape[1] == group and dw.shape[1] == 1
            and dy.shape[1] % group == 0):
        return None
    kernel_shape = tuple(attrs["kernel_shape"])
    strides, dilations, head, tail, _ = window_attrs(attrs, kernel_shape)
    geom = Geometry(kernel_shape, strides, dilations, head, tail, dy.shape[2:])
    work = dy.shape[0] * dy.shape[1] * dy.shape[2] * dy.shape[3] * kernel_shape[0] \
        * kernel_shape[1]
    run = conv_grad_weight_parallel if parallel(dy.shape[1], work) else conv_grad_weight_serial
    return run, window_tuple(geom)


@override(xp_conv_grad_weight, _prepare_conv_grad_weight)
def conv_grad_weight(state, ctx, inputs, outputs, attrs) -> bool:
    x, dy = inputs
    dw = outputs[0]
    if not contiguous(x, dy, dw):
        return False
    run, g = state
    run(x, dy, _kernels(dw), g)
    return True


kernels = {"Conv": conv, "ConvTranspose": conv_transpose,
           "portable.ConvGradWeight": conv_grad_weight}
