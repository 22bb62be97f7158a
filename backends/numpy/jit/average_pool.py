"""Compiled AveragePool and portable.AveragePoolGrad, 2-D NCHW.

The pool sums separably: per output row, the input rows its windows read into one row, then
each window's columns of that row (``_sum_planes``); a stride-1 pool as large as its input
sums each kernel row and column over all its planes at once (``_sum_same``). The gradient
walks kernel offsets (row, then column) and, for each, the rows and runs of windows that read
that offset inside the input. Either way the inner loops are adds with no bounds test. A 3x3
pool at stride 2, or at stride 1 as large as its input, takes the fused loops of ``pool_3x3``
instead, with the same sums; 2x2 windows tiling the plane take ``average_pool_pairs``.
The divisor of window (oh, ow) is the product of per-axis counts, as in the xp kernel:
positions inside [-head, size + tail) when count_include_pad (the declared or auto_pad
padding; the extra reach of ceil_mode never counts), else inside [0, size). A window with
nothing to count divides by zero to NaN, as the xp kernel does.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.pool_3x3 import same_block_mean, stride2_block_mean
from backends.numpy.jit.pool_3x3 import takes as takes_3x3
from backends.numpy.jit.support import (JIT, contiguous, floats, inside_span, override,
                                        parallel, same_size, span, tiles, window_tuple)
from backends.xp.kernels.conv import average_pool as xp_average_pool
from backends.xp.kernels.conv import average_pool_grad as xp_average_pool_grad
from portable.ops.conv import pool_geometry


@numba.njit(**JIT)
def _counts(out, kernel, stride, dilation, head, low, high):
    """How many positions of each window along one axis lie inside [low, high)."""
    count = np.zeros(out, np.int64)
    for o in range(out):
        for j in range(kernel):
            pos = o * stride - head + j * dilation
            if low <= pos < high:
                count[o] += 1
    return count


@numba.njit(**JIT)
def _divisors(rows, cols, size, tail, include_pad, g):
    """(rows, cols) float64 divisors of every window."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    if include_pad:
        down = _counts(rows, kh, sh, dh, ph, -ph, size[0] + tail[0])
        across = _counts(cols, kw, sw, dw, pw, -pw, size[1] + tail[1])
    else:
        down = _counts(rows, kh, sh, dh, ph, 0, size[0])
        across = _counts(cols, kw, sw, dw, pw, 0, size[1])
    divisor = np.empty((rows, cols), np.float64)
    for oh in range(rows):
        for ow in range(cols):
            divisor[oh, ow] = down[oh] * across[ow]
    return divisor


@numba.njit(**JIT)
def _spans(out, kernel, stride, dilation, head, size):
    """Per kernel offset j along one axis: the windows [lo, hi) that read it inside."""
    spans = np.empty((kernel, 2), np.int64)
    for j in range(kernel):
        lo, hi = span(j * dilation - head, stride, out, size)
        spans[j, 0] = lo
        spans[j, 1] = hi
    return spans


@numba.njit(**JIT)
def _sum_planes(x, y, divisor, g, first, last):
    """Planes [first, last) of y (P, rows, cols) = the window sums of x (P, height, width)
    over ``divisor``, separably: per output row, the input rows its windows read are summed
    into one row (whole rows: a loop LLVM vectorises), then each window sums its columns of
    that row. kh + kw adds per output instead of kh * kw, and the windows' ranges per kernel
    offset are found once for all planes."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    height, width = x.shape[1], x.shape[2]
    rows, cols = y.shape[1], y.shape[2]
    down = _spans(rows, kh, sh, dh, ph, height)
    across = _spans(cols, kw, sw, dw, pw, width)
    xf, yf, df = x.reshape(-1), y.reshape(-1), divisor.reshape(-1)
    plane_in, plane_out = height * width, rows * cols
    acc = np.empty(width, x.dtype)  # (the input rows of one output row, summed)
    for p in range(first, last):
        yo, xo = p * plane_out, p * plane_in
        for oh in range(rows):
            for i in range(width):
                acc[i] = 0
            for jh in range(kh):
                if down[jh, 0] <= oh < down[jh, 1]:
                    row = xo + (oh * sh + jh * dh - ph) * width
                    for i in range(width):
                        acc[i] += xf[np.uint64(row + i)]
            out = yo + oh * cols
            for ow in range(cols):
                yf[np.uint64(out + ow)] = 0
            for jw in range(kw):
                start = jw * dw - pw
                if sw == 1:
                    for ow in range(across[jw, 0], across[jw, 1]):
                        yf[np.uint64(out + ow)] += acc[np.uint64(start + ow)]
                else:
                    for ow in range(across[jw, 0], across[jw, 1]):
                        yf[np.uint64(out + ow)] += acc[np.uint64(start + ow * sw)]
            for ow in range(cols):
                yf[np.uint64(out + ow)] = yf[np.uint64(out + ow)] / df[oh * cols + ow]


@numba.njit(**JIT)
def _sum_same(x, y, divisor, g):
    """``_sum_planes`` for a stride-1 pool as large as its input (Inception's 3x3 pools with
    pads of 1), as ``max_pool_forward._max_same`` takes the maximum: one add per kernel row down and
    one per kernel column across, each over every plane at once, the edge rows and columns
    (where a shift reads across a plane's or a row's end) summed again one by one; then one
    pass over ``divisor``. The same adds in the same order as ``_sum_planes``. 576 planes of
    14x14: 0.42-0.50 ms that way, 0.23-0.32 ms so."""
    kh, kw, _, _, dh, dw, ph, pw = g
    planes, height, width = x.shape
    plane = height * width
    size = planes * plane
    flat_x, flat_y = x.reshape(size), y.reshape(size)
    v = np.empty(size, x.dtype)  # (the input rows of each output row, summed)
    _shifted_sum(flat_x, v, kh, dh, ph, width)
    top, bottom = inside_span(kh, dh, ph, height)
    for p in range(planes):
        for oh in range(top):
            _edge_row(flat_x, v, p * height, oh, kh, dh, ph, height, width)
        for oh in range(bottom, height):
            _edge_row(flat_x, v, p * height, oh, kh, dh, ph, height, width)
    _shifted_sum(v, flat_y, kw, dw, pw, 1)
    left, right = inside_span(kw, dw, pw, width)
    for r in range(planes * height):
        for ow in range(left):
            flat_y[r * width + ow] = _edge_sum(v, r * width, ow, kw, dw, pw, width)
        for ow in range(right, width):
            flat_y[r * width + ow] = _edge_sum(v, r * width, ow, kw, dw, pw, width)
    flat_d = divisor.reshape(plane)
    for p in range(planes):
        for i in range(plane):
            flat_y[np.uint64(p * plane + i)] /= flat_d[np.uint64(i)]


@numba.njit(**JIT)
def _shifted_sum(source, out, taps, dilation, head, unit):
    """out[i] = the sum of source[i + (j * dilation - head) * unit] over the taps j whose
    index lies inside ``source`` (0 where none does), added in tap order."""
    size = source.shape[0]
    out[:] = 0
    for j in range(taps):
        shift = (j * dilation - head) * unit
        for i in range(max(0, -shift), min(size, size - shift)):
            out[np.uint64(i)] += source[np.uint64(i + shift)]


@numba.njit(inline="always", **JIT)
def _edge_row(flat_x, v, first_row, oh, kh, dh, ph, height, width):
    """v's row oh of the plane starting at row ``first_row``: the sum of the input rows its
    windows read inside the plane."""
    at = (first_row + oh) * width
    for w in range(width):
        v[np.uint64(at + w)] = 0
    for jh in range(kh):
        ih = oh + jh * dh - ph
        if 0 <= ih < height:
            source = (first_row + ih) * width
            for w in range(width):
                v[np.uint64(at + w)] += flat_x[np.uint64(source + w)]


@numba.njit(inline="always", **JIT)
def _edge_sum(v, base, ow, kw, dw, pw, width):
    """The sum over window ow's columns inside the row of ``v`` at ``base``."""
    total = v.dtype.type(0)
    for jw in range(kw):
        iw = ow + jw * dw - pw
        if 0 <= iw < width:
            total += v[np.uint64(base + iw)]
    return total


@numba.njit(**JIT)
def average_pool_serial(x, y, tail, include_pad, g):
    divisor = _divisors(y.shape[1], y.shape[2], x.shape[1:], tail, include_pad, g)
    if same_size(x, y, g):
        _sum_same(x, y, divisor, g)
    else:
        _sum_planes(x, y, divisor, g, 0, x.shape[0])


@numba.njit(**JIT)
def _block_mean_3x3(x, y, divisor, g):
    """Planes x into y by the fused loops of ``pool_3x3``: two passes over the block at
    stride 1, rows of column sums split into halves at stride 2."""
    if g[2] == 1:
        same_block_mean(x, y, divisor, np.empty(x.size, x.dtype))
    else:
        stride2_block_mean(x, y, (g[6], g[7]), divisor, np.empty(x.shape[2], x.dtype),
                           np.empty((2, x.shape[2] // 2 + 1), x.dtype))


@numba.njit(**JIT)
def average_pool_3x3_serial(x, y, tail, include_pad, g):
    """``average_pool_serial`` for the 3x3 pools ``pool_3x3.takes``."""
    divisor = _divisors(y.shape[1], y.shape[2], x.shape[1:], tail, include_pad, g)
    _block_mean_3x3(x, y, divisor.astype(x.dtype), g)


@numba.njit(parallel=True, **JIT)
def average_pool_3x3_parallel(x, y, tail, include_pad, g):
    divisor = _divisors(y.shape[1], y.shape[2], x.shape[1:], tail, include_pad,
                        g).astype(x.dtype)
    blocks = min(x.shape[0], 16)  # (blocks of planes, a few per thread)
    per = -(-x.shape[0] // blocks)
    for b in numba.prange(blocks):
        lo, hi = b * per, min(x.shape[0], (b + 1) * per)
        if lo < hi:
            _block_mean_3x3(x[lo:hi], y[lo:hi], divisor, g)


@numba.njit(**JIT)
def average_pool_pairs(x, y):
    """y (N, C, H/2, W/2) = the mean of each 2x2 window of x (N, C, H, W) at stride 2, the
    windows tiling x (DenseNet's transitions): the general loop's sums in its order (rows,
    then columns), a quarter of each (exact, as its division by 4 is)."""
    n, c, rows, cols = y.shape
    for i in range(n):
        for ch in range(c):
            for oh in range(rows):
                top, bottom, out = x[i, ch, 2 * oh], x[i, ch, 2 * oh + 1], y[i, ch, oh]
                for ow in range(cols):
                    k, k1 = np.uint64(2 * ow), np.uint64(2 * ow + 1)
                    out[np.uint64(ow)] = ((top[k] + bottom[k]) + (top[k1] + bottom[k1])) / 4


@numba.njit(parallel=True, **JIT)
def average_pool_parallel(x, y, tail, include_pad, g):
    divisor = _divisors(y.shape[1], y.shape[2], x.shape[1:], tail, include_pad, g)
    if same_size(x, y, g):  # (blocks of planes, a few per thread)
        blocks = min(x.shape[0], 16)
        per = -(-x.shape[0] // blocks)
        for b in numba.prange(blocks):
            lo, hi = b * per, min(x.shape[0], (b + 1) * per)
            if lo < hi:
                _sum_same(x[lo:hi], y[lo:hi], divisor, g)
        return
    for p in numba.prange(x.shape[0]):
        _sum_planes(x, y, divisor, g, p, p + 1)


@numba.njit(**JIT)
def _spread_plane(dy, dx, divisor, g):
    kh, kw, sh, sw, dh, dw, ph, pw = g
    height, width = dx.shape
    rows, cols = dy.shape
    share = dy / divisor
    dx[:, :] = 0
    for jh in range(kh):
        top = jh * dh - ph
        oh_lo, oh_hi = span(top, sh, rows, height)
        for jw in range(kw):
            start = jw * dw - pw
            lo, hi = span(start, sw, cols, width)
            for oh in range(oh_lo, oh_hi):
                part, row = share[oh], dx[np.uint64(oh * sh + top)]
                for ow in range(lo, hi):
                    row[np.uint64(ow * sw + start)] += part[np.uint64(ow)]


@numba.njit(**JIT)
def average_pool_grad_serial(dy, dx, tail, include_pad, g):
    divisor = _divisors(dy.shape[1], dy.shape[2], dx.shape[1:], tail, include_pad, g)
    for p in range(dx.shape[0]):
        _spread_plane(dy[p], dx[p], divisor, g)


@numba.njit(parallel=True, **JIT)
def average_pool_grad_parallel(dy, dx, tail, include_pad, g):
    divisor = _divisors(dy.shape[1], dy.shape[2], dx.shape[1:], tail, include_pad, g)
    for p in numba.prange(dx.shape[0]):
        _spread_plane(dy[p], dx[p], divisor, g)


def _planes(a):
    return a.reshape((-1,) + a.shape[2:])


def _prepare(x, y, attrs):
    """(loop, geometry, declared tail, count_include_pad) of a pool from x to y (types), or
    None; the gradient's loop is picked by the caller from the same work estimate."""
    if not floats(x, y):
        return None
    geom = pool_geometry(x.shape[2:], attrs)
    planes = y.shape[0] * y.shape[1]
    fast = parallel(planes, planes * geom.out[0] * geom.out[1] * geom.kernel[0] * geom.kernel[1])
    return fast, window_tuple(geom), geom.tail, bool(attrs["count_include_pad"])


def _prepare_average_pool(input_types, output_types, attrs):
    state = _prepare(input_types[0], output_types[0], attrs)
    if state is None:
        return None
    fast, g, *rest = state
    x_shape, y_shape = input_types[0].shape[2:], output_types[0].shape[2:]
    if g[:2] == (2, 2) and tiles(pool_geometry(x_shape, attrs), x_shape):
        return (average_pool_pairs, None, *rest)  # (2x2 windows tiling the plane)
    if takes_3x3(g, x_shape, y_shape):
        return (average_pool_3x3_parallel if fast else average_pool_3x3_serial, g, *rest)
    return (average_pool_parallel if fast else average_pool_serial, g, *rest)


@override(xp_average_pool, _prepare_average_pool)
def average_pool(state, ctx, inputs, outputs, attrs) -> bool:
    x, y = inputs[0], outputs[0]
    if not contiguous(x, y):
        return False
    run, g, tail, include_pad = state
    if g is None:
        run(x, y)  # (average_pool_pairs: the 4-D arrays as they are)
    else:
        run(_planes(x), _planes(y), tail, include_pad, g)
    return True


def _prepare_average_pool_grad(input_types, output_types, attrs):
    # (X, input 1, is ignored: dX's type says where the windows lie)
    state = _prepare(output_types[0], input_types[0], attrs)
    if state is None:
        return None
    fast, *rest = state
    return (average_pool_grad_parallel if fast else average_pool_grad_serial, *rest)


@override(xp_average_pool_grad, _prepare_average_pool_grad)
def average_pool_grad(state, ctx, inputs, outputs, attrs) -> bool:
    dy, dx = inputs[0], outputs[0]
    if not contiguous(dy, dx):
        return False
    run, g, tail, include_pad = state
    run(_planes(dy), _planes(dx), tail, include_pad, g)
    return True


kernels = {"AveragePool": average_pool, "portable.AveragePoolGrad": average_pool_grad}
