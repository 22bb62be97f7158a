"""Compiled depthwise convolution, 2-D NCHW, and the two ops its gradient is made of.

A depthwise Conv has one input channel per group (group == C_in > 1, W of shape (M, 1, kh, kw),
M = C_in * multiplier): output channel m reads input channel m // multiplier only. The xp kernel
runs it as a batch of tiny GEMMs on an im2col copy; here each output plane is a sum over kernel
offsets of a weight times a shifted input row, an inner loop with no bounds test that LLVM
vectorises (stride 1) and no copy at all. Planes of a few output positions (a 2x2 or 4x4
MobileNet tail) run channel-inner instead (``conv_channels``), where the loop overhead per
plane would otherwise be most of the cost. Larger planes at stride 1 and 2 run as one
vectorised run per kernel offset over a zero-padded copy of the plane (``conv_wide``,
``conv_wide_stride2``). The loops hold their results inside bounds, the Relu or Clip of a
FusedConv (``backends.numpy.jit.fused_conv``), before they leave the cache.

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


@numba.njit(inline="always", **JIT)
def bound(value, low, high):
    """``value`` held inside [low, high] as np.clip holds it: maximum, then minimum (high
    wins where low > high), and NaN stays NaN (its comparisons are false)."""
    value = low if value < low else value
    return high if value > high else value


@numba.njit(**JIT)
def _conv_plane(x, w, bias, y, g, low, high):
    """y (rows, cols) = bias + the correlation of plane x with kernel w (kh, kw), then held
    inside [low, high] (FusedConv's Relu or Clip; -inf and inf for none). The kernel offset
    is the outer loop: its weight, row range and column run are fixed across the plane
    (1.5-2x faster than visiting the offsets inside each output row)."""
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
    if low > -np.inf or high < np.inf:
        for oh in range(rows):
            for ow in range(cols):
                y[oh, ow] = bound(y[oh, ow], low, high)


@numba.njit(**JIT)
def conv_serial(x, w, bias, y, g, low, high):
    n, m = y.shape[:2]
    multiplier = m // x.shape[1]
    for p in range(n * m):
        i, o = p // m, p % m
        _conv_plane(x[i, o // multiplier], w[o, 0], bias[o], y[i, o], g, low, high)


@numba.njit(parallel=True, **JIT)
def conv_parallel(x, w, bias, y, g, low, high):
    n, m = y.shape[:2]
    multiplier = m // x.shape[1]
    for p in numba.prange(n * m):
        i, o = p // m, p % m
        _conv_plane(x[i, o // multiplier], w[o, 0], bias[o], y[i, o], g, low, high)


@numba.njit(**JIT)
def conv_wide(x, w, bias, y, g, low, high):
    """The same Conv at stride 1 and dilation 1, for planes past ``conv_channels``' size.

    The plane loop's runs are one output row long (16 elements on a 16x16 plane), so loop
    overhead dominates a 48-channel 16x16 plane. Here each input plane is first copied into
    a zero-padded plane exactly as wide as the windows read (``cols + kw - 1``), and the
    output is computed at that width: every kernel offset is then one run over the whole
    plane (``rows * wide`` elements, vectorised), and the extra columns are dropped when
    the result is bounded into Y. Each output element sums bias, then the offsets row by
    row, as the plane loop does; the padding adds products by zero, which change no finite
    sum (a weight of inf or NaN makes NaN there, as the xp kernel's zero-padded im2col
    does)."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    n, m, rows, cols = y.shape
    height, width = x.shape[2:]
    multiplier = m // x.shape[1]
    wide, tall = cols + kw - 1, rows + kh - 1
    padded = np.zeros(tall * wide + kw, y.dtype)  # (+kw: the last offset's run overshoots)
    plane = padded[:tall * wide].reshape((tall, wide))
    total = np.empty(rows * wide, y.dtype)
    run = np.uint64(rows * wide)
    # the input rows and columns inside the padded plane (the rest stays zero)
    r_lo, r_hi = max(0, ph), min(tall, height + ph)
    q_lo, q_hi = max(0, pw), min(wide, width + pw)
    for i in range(n):
        for o in range(m):
            c = o // multiplier
            for r in range(r_lo, r_hi):
                source, row = x[i, c, r - ph], plane[r]
                for q in range(q_lo, q_hi):
                    row[np.uint64(q)] = source[np.uint64(q - pw)]
            b = bias[o]
            for t in range(run):
                total[t] = b
            for jh in range(kh):
                for jw in range(kw):
                    weight = w[o, 0, jh, jw]
                    shifted = padded[np.uint64(jh * wide + jw):]
                    for t in range(run):
                        total[t] += weight * shifted[t]
            for r in range(rows):
                out, start = y[i, o, r], np.uint64(r * wide)
                for q in range(cols):
                    out[np.uint64(q)] = bound(total[start + np.uint64(q)], low, high)


@numba.njit(**JIT)
def conv_wide_stride2(x, w, bias, y, g, low, high):
    """The same Conv at stride 2 and dilation 1: ``conv_wide`` with the rows split by parity.

    At stride 2 the plane loop's runs are half an output row (16 elements for a 32x32 input)
    and read every other element. Here the padded rows go, by parity, into two planes
    (row R of the padded image to plane R % 2, row R // 2), each ``wide = 2 * half``
    elements wide: the windows of kernel offset (jh, jw) then read plane jh % 2 at ``2 * t +
    (jh // 2) * wide + jw`` for output position t of a plane ``half`` positions wide, one
    stride-2 run over the whole plane per offset (LLVM loads it as two vectors and a
    shuffle). Each output element sums bias, then the offsets row by row, as the plane loop
    does; the padding adds products by zero (see ``conv_wide``)."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    n, m, rows, cols = y.shape
    height, width = x.shape[2:]
    multiplier = m // x.shape[1]
    half = cols + (kw - 1) // 2  # (2 * half >= 2 * (cols - 1) + kw: every window fits)
    wide = 2 * half
    tall = rows + (kh - 1) // 2  # rows of each parity plane the windows reach
    size = tall * wide
    planes = np.zeros((2, size + kw), y.dtype)  # (+kw: the last offset's run overshoots)
    total = np.empty(rows * half, y.dtype)
    run = np.uint64(rows * half)
    r_hi = min(height, 2 * tall - ph)  # the input rows and columns that land in the planes
    q_hi = min(width, wide - pw)
    for i in range(n):
        for o in range(m):
            c = o // multiplier
            for r in range(r_hi):
                padded_row = r + ph
                source = x[i, c, r]
                row = planes[padded_row % 2, np.uint64((padded_row // 2) * wide + pw):]
                for q in range(q_hi):
                    row[np.uint64(q)] = source[np.uint64(q)]
            b = bias[o]
            for t in range(run):
                total[t] = b
            for jh in range(kh):
                plane = planes[jh % 2]
                for jw in range(kw):
                    weight = w[o, 0, jh, jw]
                    shifted = plane[np.uint64((jh // 2) * wide + jw):]
                    for t in range(run):
                        total[t] += weight * shifted[np.uint64(2) * t]
            for r in range(rows):
                out, start = y[i, o, r], np.uint64(r * half)
                for q in range(cols):
                    out[np.uint64(q)] = bound(total[start + np.uint64(q)], low, high)


@numba.njit(**JIT)
def conv_channels(x, w, bias, y, g, low, high):
    """The same Conv (multiplier 1) with the channel as the inner loop, for small planes.

    On a 2x2 or 4x4 plane the plane loop's runs are one to four elements long, so its cost
    is loop overhead per plane and kernel offset (about 100 ns a plane: 25 us for 240
    channels of 2x2). Here each image is first copied channel-last (pixels (H*W, C)) and the
    weights tap-major (taps (kh*kw, C)): every output position then adds, per kernel offset
    inside the image, one weight row times one pixel row, a run of C elements that LLVM
    vectorises. Each output element sums the same products in the same order (bias, then
    the offsets row by row) as the plane loop, so the two agree bit for bit."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    n, m, rows, cols = y.shape
    height, width = x.shape[2:]
    taps = np.empty((kh * kw, m), y.dtype)
    for o in range(m):
        for jh in range(kh):
            for jw in range(kw):
                taps[jh * kw + jw, o] = w[o, 0, jh, jw]
    pixels = np.empty((height * width, m), y.dtype)
    total = np.empty(m, y.dtype)
    for i in range(n):
        for c in range(m):
            for r in range(height):
                for q in range(width):
                    pixels[r * width + q, c] = x[i, c, r, q]
        for oh in range(rows):
            for ow in range(cols):
                total[:] = bias
                for jh in range(kh):
                    r = oh * sh + jh * dh - ph
                    if r < 0 or r >= height:
                        continue
                    for jw in range(kw):
                        q = ow * sw + jw * dw - pw
                        if q < 0 or q >= width:
                            continue
                        tap, pixel = taps[jh * kw + jw], pixels[r * width + q]
                        for c in range(m):
                            total[c] += tap[c] * pixel[c]
                for c in range(m):
                    y[i, c, oh, ow] = bound(total[c], low, high)


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


# When a depthwise Conv runs channel-inner (``conv_channels``): multiplier 1, at least
# CHANNELS_MIN channels (a shorter run does not pay for the copies) and at most
# CHANNELS_PLANE output positions per plane. Measured at batch 1, one thread, 3x3 with Clip:
# 240 channels of 2x2 7 us against 43 (plane loop and NumPy's Clip), 144 of 4x4 9 against
# 38, 48 of 8x8 7 against 15, 48 of 16x16 26 against 34 and 48 of 32x32 at stride 2 level
# (the channel-last copies grow with the plane), 8 channels of 32x32 three times slower.
CHANNELS_MIN = 16
CHANNELS_PLANE = 64
# At stride 2 (dilation 1) the parity-split loop (``conv_wide_stride2``) is taken from
# WIDE_STRIDE2_POSITIONS output positions a plane, and below that wherever the channel-inner
# loop is not. Same setting, 3x3 with Clip, in us (plane loop / channel-inner / parity split):
# 48 channels 32x32 -> 16x16 51 / 41 / 13, 48 of 16x16 -> 8x8 16 / 8.9 / 5.3, 48 of 8x8 ->
# 4x4 8.4 / 3.0 / 3.2, 144 of 4x4 -> 2x2 18 / 3.2 / 6.6, 8 of 64x64 28 / 44 / 6.4; and the
# parity split beat the plane loop on every smaller plane tried (4 channels of 4x4: 0.8 us
# against 1.0; 5x5 kernels: 2-3x).
WIDE_STRIDE2_POSITIONS = 64

UNBOUNDED = (-np.inf, np.inf)


def plan_conv(input_types, output_types, attrs, limits=UNBOUNDED):
    """``(loop, bias when absent, geometry, low, high)`` for a depthwise Conv: one X channel
    per group (group == C > 1), W (M, 1, kh, kw); None for any other Conv. ``limits`` are
    the bounds the loop holds its results in (a fused Relu or Clip), cast to X's dtype."""
    x, w, y = input_types[0], input_types[1], output_types[0]
    group = attrs["group"]
    bias = input_types[2] if _with_bias(input_types) else None
    if not (floats(x, w, y) and (bias is None or bias.dtype == x.dtype)
            and group > 1 and x.shape[1] == group and w.shape[1] == 1
            and w.shape[0] % group == 0):
        return None
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    planes = y.shape[0] * y.shape[1]
    positions = geom.out[0] * geom.out[1]
    work = planes * positions * geom.kernel[0] * geom.kernel[1]
    stride2 = geom.strides == (2, 2) and geom.dilations == (1, 1)
    if parallel(planes, work):
        loop = conv_parallel
    elif stride2 and positions >= WIDE_STRIDE2_POSITIONS:
        loop = conv_wide_stride2
    elif (w.shape[0] == group and group >= CHANNELS_MIN and positions <= CHANNELS_PLANE):
        loop = conv_channels
    elif geom.strides == (1, 1) and geom.dilations == (1, 1):
        loop = conv_wide
    elif stride2:
        loop = conv_wide_stride2
    else:
        loop = conv_serial
    zeros = np.zeros(w.shape[0], x.dtype)  # (read only: the bias of every call without one)
    low, high = (x.dtype.type(limit) for limit in limits)
    return loop, zeros, window_tuple(geom), low, high


def _prepare_conv(input_types, output_types, attrs):
    return plan_conv(input_types, output_types, attrs)


def run_conv(state, x, w, bias, y) -> bool:
    """Run a planned depthwise Conv (``plan_conv``) on C-contiguous arrays (bias None when
    absent); False, running nothing, for any other layout."""
    if not contiguous(x, w, y, bias):
        return False
    loop, zeros, g, low, high = state
    loop(x, w, zeros if bias is None else bias, y, g, low, high)
    return True


@override(xp_conv, _prepare_conv)
def conv(state, ctx, inputs, outputs, attrs) -> bool:
    return run_conv(state, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None,
                    outputs[0])


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
