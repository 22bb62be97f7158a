"""Compiled small dense Conv, 2-D NCHW, stride 1: one call in place of pad, im2col and GEMM.

A Conv of a few channels on a small image (4 channels, 3x3, 8x8: 9,216 multiply-adds) is all
overhead on the xp path: zeroing the padded copy, copying the input into it, the im2col copy
and the GEMM are four NumPy calls of one to three microseconds each, beside about a
microsecond of arithmetic. Here the whole Conv is one compiled call.

The loop pads each image into a zeroed buffer whose rows are ``wide`` elements long, wide
enough for every window of an output row. At stride 1 the windows of kernel offset (jh, jw)
then read one contiguous run of that buffer, shifted by ``jh * dh * wide + jw * dw``: the
output, kept ``wide`` elements per row too (the extra columns are never copied out), is a sum
over input channels and kernel offsets of a weight times one shifted run, an inner loop with
no bounds test that LLVM vectorises. The buffers are allocated by the call (a few KiB for
such Convs, about ``SMALL_WORK`` elements at most), so a prepared kernel holds no memory
and two threads may run it at once.

Taken only where it pays: float32/float64, group 1, stride 1, the windows reaching into
padding (an unpadded Conv is one strided copy and one GEMM on the xp path), and at most
``SMALL_WORK`` multiply-adds (``FEW_CHANNELS_WORK`` for at most ``FEW_CHANNELS`` output
channels), where a BLAS GEMM's speed has not yet paid for its copies.

The plain Conv's kernel (``plain_conv.py``) runs this loop where the compiled dense plan
does not take the Conv; the FusedConv (``fused_conv.py``) runs its bounded form.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.depthwise import bound
from backends.numpy.jit.support import JIT, floats
from portable.ops.conv import window_geometry

# Multiply-adds (counting the discarded wide columns) up to which the loop runs a Conv.
# Measured on 2 shared cores (load ~10), one thread, against the xp kernel with its views kept
# (pad, im2col, sgemm): the loop is 2.2x faster at 1.2e4 (4 channels, 8x8), 1.1x at 1.7e5
# (8 channels, 16x16), and level (0.9-1.1x) from 6.6e5 to 3e6 (16-64 channels), where the
# GEMM's arithmetic outweighs its copies: the loop stops while it still clearly wins.
SMALL_WORK = 1 << 18
# The limit for Convs of at most FEW_CHANNELS output channels, measured (load 1.6) with the
# loop's passes of four kernel offsets against the compiled FusedConv's dense plan (im2col +
# sgemm, then the bias-and-bounds pass), float32 + Relu, one thread, in us:
#   (N, C, H, M, kernel)     work      loop    columns + pass
#   8, 1, 28, 6, 5x5        1.1e6      30.2        51.8      (LeNet's first Conv, batch 8)
#   2, 1, 28, 6, 5x5        2.7e5       7.9        14.5
#   4, 3, 28, 8, 3x3        7.3e5      21.9        30.7
#   1, 4, 32, 8, 5x5        9.2e5      23.3        31.4
#   1, 3, 64, 8, 3x3        9.1e5      25.6        29.5
#   1, 3, 32, 16, 3x3       4.7e5      15.1        14.4
#   1, 12, 16, 24, 3x3      7.5e5      21.0        16.7
# Each pass over an output channel's run is its own, so the loop pays for many output
# channels where the GEMM shares its copies among them.
FEW_CHANNELS = 8
FEW_CHANNELS_WORK = 1 << 21


@numba.njit(inline="always", **JIT)
def _pad_image(x, i, padded, ph, pw, wide, tall):
    """The interior of ``padded`` (C, tall * wide) = image ``i`` of x placed at (ph, pw);
    the border is left as it is (zero: every image writes the same interior)."""
    _, c, height, width = x.shape
    bottom = min(height, tall - ph)  # the input rows and columns that land inside it (all
    right = min(width, wide - pw)  # of them at stride 1; kept safe should a tail crop)
    for ch in range(c):
        for r in range(bottom):
            base = (r + ph) * wide + pw
            for q in range(right):
                padded[ch, base + q] = x[i, ch, r, q]


@numba.njit(inline="always", **JIT)
def _offsets(c, kh, kw, dh, dw, tall, wide):
    """Where each kernel offset's run starts in the flat padded copy (C * tall * wide), in
    (channel, kernel row, kernel column) order."""
    starts = np.empty(c * kh * kw, np.int64)
    j = 0
    for k in range(c):
        for jh in range(kh):
            for jw in range(kw):
                starts[j] = k * tall * wide + jh * dh * wide + jw * dw
                j += 1
    return starts


@numba.njit(inline="always", **JIT)
def _add_products(flat, w, o, weights, starts, out):
    """out += output channel ``o``'s weights times the shifted runs of the flat padded copy,
    kernel offset by offset in (channel, kernel row, kernel column) order: the one summation
    order both loops share. Four offsets are added in each pass over ``out``, one after
    another (each addition rounds as it did alone: nothing is reassociated), so ``out`` is
    loaded and stored a quarter as often (LeNet's 1->6 5x5 Conv: 7 passes instead of 25).
    ``weights`` is scratch for W[o] in that order."""
    c, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    j = 0
    for k in range(c):
        for jh in range(kh):
            for jw in range(kw):
                weights[j] = w[o, k, jh, jw]
                j += 1
    run = out.shape[0]
    offsets = starts.shape[0]
    j = 0
    while j + 4 <= offsets:
        a0, a1, a2, a3 = weights[j], weights[j + 1], weights[j + 2], weights[j + 3]
        s0, s1, s2, s3 = starts[j], starts[j + 1], starts[j + 2], starts[j + 3]
        for t in range(run):
            u = np.uint64(t)
            out[u] = (((out[u] + a0 * flat[np.uint64(s0 + t)]) + a1 * flat[np.uint64(s1 + t)])
                      + a2 * flat[np.uint64(s2 + t)]) + a3 * flat[np.uint64(s3 + t)]
        j += 4
    while j < offsets:
        a0, s0 = weights[j], starts[j]
        for t in range(run):
            u = np.uint64(t)
            out[u] += a0 * flat[np.uint64(s0 + t)]
        j += 1


@numba.njit(**JIT)
def conv_small(x, w, bias, y, g):
    """y = bias + Conv(x, w) at stride 1, for any layout of ``x`` and ``y``. ``g`` is (kh, kw,
    dh, dw, head_h, head_w), heads >= 0 (Conv pads are); the tails follow from the shapes."""
    kh, kw, dh, dw, ph, pw = g
    n, c = x.shape[:2]
    m = w.shape[0]
    rows, cols = y.shape[2], y.shape[3]
    tall = rows + (kh - 1) * dh  # the padded image's size: exactly what the windows reach
    wide = cols + (kw - 1) * dw
    padded = np.zeros((c, tall * wide), x.dtype)
    out = np.empty((rows - 1) * wide + cols, x.dtype)  # one offset's reads, row by row
    starts, weights = _offsets(c, kh, kw, dh, dw, tall, wide), np.empty(c * kh * kw, x.dtype)
    for i in range(n):
        _pad_image(x, i, padded, ph, pw, wide, tall)
        for o in range(m):
            out[:] = bias[o]
            _add_products(padded.reshape(-1), w, o, weights, starts, out)
            for r in range(rows):  # (row views and unsigned indices: a vectorised copy)
                row, at = y[i, o, r], r * wide
                for q in range(cols):
                    row[np.uint64(q)] = out[np.uint64(at + q)]


@numba.njit(**JIT)
def conv_small_bounded(x, w, bias, z, y, g, low, high):
    """y = bound((Conv(x, w) + bias) + z, low, high): ``conv_small`` with FusedConv's
    epilogue in the same call, in the composed kernel's order (the sums start at zero, then
    the bias, then ``z`` where it is not None, then ``depthwise.bound``), so the result is
    the one ``conv_small`` without bias and a ``fused_conv.bias_and_bounds`` pass give, bit
    for bit. Any layout of x, z and y."""
    kh, kw, dh, dw, ph, pw = g
    n, c = x.shape[:2]
    m = w.shape[0]
    rows, cols = y.shape[2], y.shape[3]
    tall = rows + (kh - 1) * dh
    wide = cols + (kw - 1) * dw
    padded = np.zeros((c, tall * wide), x.dtype)
    out = np.empty((rows - 1) * wide + cols, x.dtype)
    starts, weights = _offsets(c, kh, kw, dh, dw, tall, wide), np.empty(c * kh * kw, x.dtype)
    zero = x.dtype.type(0)
    for i in range(n):
        _pad_image(x, i, padded, ph, pw, wide, tall)
        for o in range(m):
            out[:] = zero
            _add_products(padded.reshape(-1), w, o, weights, starts, out)
            b = bias[o]
            for r in range(rows):
                row, at = y[i, o, r], r * wide
                if z is None:  # (decided when the loop is compiled: None is a type of its own)
                    for q in range(cols):
                        row[np.uint64(q)] = bound(out[np.uint64(at + q)] + b, low, high)
                else:
                    extra = z[i, o, r]
                    for q in range(cols):
                        u = np.uint64(q)
                        row[u] = bound((out[np.uint64(at + q)] + b) + extra[u], low, high)


def prepare_small(input_types, output_types, attrs):
    """(bias when absent, geometry) for a Conv the loop takes, else None."""
    x, w, y = input_types[0], input_types[1], output_types[0]
    bias = input_types[2] if len(input_types) > 2 else None
    if not (floats(x, w, y) and (bias is None or bias.dtype == x.dtype)
            and attrs["group"] == 1):
        return None
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    if any(s != 1 for s in geom.strides):
        return None
    tail = geom.fit_tail(x.shape[2:])
    if not (any(h > 0 for h in geom.head) or any(t > 0 for t in tail)):
        return None
    rows, cols = geom.out
    wide = cols + (geom.kernel[1] - 1) * geom.dilations[1]
    work = x.shape[0] * w.shape[0] * x.shape[1] * geom.kernel[0] * geom.kernel[1] * rows * wide
    limit = FEW_CHANNELS_WORK if w.shape[0] <= FEW_CHANNELS else SMALL_WORK
    if work > limit or rows < 1 or cols < 1:
        return None
    zeros = np.zeros(w.shape[0], x.dtype)  # (read only: shared by every call)
    return zeros, (*geom.kernel, *geom.dilations, *geom.head)


def run_small(state, ctx, inputs, outputs, attrs) -> bool:
    zeros, g = state
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    conv_small(inputs[0], inputs[1], bias, outputs[0], g)
    return True


def step_with_bias(state, ctx, inputs, outputs, attrs) -> None:
    """A plan step's call when the step has a bias (its arrays are fixed by the plan)."""
    conv_small(inputs[0], inputs[1], inputs[2], outputs[0], state[1])


def step_without_bias(state, ctx, inputs, outputs, attrs) -> None:
    conv_small(inputs[0], inputs[1], state[0], outputs[0], state[1])
