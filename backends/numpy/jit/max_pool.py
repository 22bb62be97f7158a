"""Compiled MaxPool (with and without Indices) and portable.MaxPoolGrad, 2-D NCHW.

Arrays are seen as planes (N * C, H, W). The maximum alone is taken separably (``_max_plane``):
per output row, the input rows its windows read are reduced to one row, then each window
takes the largest of its columns there, the runs of windows that read a column inside found
once (no per-element bounds test, nothing padded or copied: the xp kernel copies every window
out, im2col). At stride 2 a wide reduced row is split into its even and odd halves first,
so that each kernel column reads consecutive places. A stride-1 pool as large as its input
(Inception's pool branch) runs each kernel row and column as one pass over all its planes at
once (``_max_same``).

A 2x2 pool at stride 2 whose windows tile the plane (LeNet's, most CNNs' downsampling) takes a
loop of its own, ``max_pool_pairs``: each output is the maximum of two pairs, read once, on
the 4-D arrays themselves, and the step is bound to it directly (``bind``). LeNet's first pool
at batch 1 ((1, 6, 28, 28)) went from 3.7 to about 1 us: the general loop's four passes over
the output for its four offsets took 2.3 us, the plane views and the wrappers around it 1.4.

Indices and the gradient need each window's *first* maximum: beside each running maximum the
loop keeps its position, taken over only by a strictly greater element, exactly as the xp
kernel's argmax over the padded windows: padding reads as -inf with index -1, a NaN wins over
numbers and the first NaN stays. So even a window whose maximum is -inf (or that lies in the
padding) gets the same index there.
"""
from __future__ import annotations


import numba
import numpy as np

from backends.numpy.jit.support import (JIT, contiguous, direct_call, floats, inside_span,
                                        override, parallel, same_size, span, window_tuple)
from backends.xp.kernels.conv import max_pool as xp_max_pool
from backends.xp.kernels.conv import max_pool_grad as xp_max_pool_grad
from portable.ops.conv import pool_geometry


# Rows at least this wide are split into halves at stride 2: 64 planes of 111x111 went from
# 0.50 to 0.40 ms so, 128 of 55x55 stayed at 0.29, and 256 of 27x27 went from 0.19 to 0.24
# (the split costs more than it saves on short rows).
HALVES_WIDTH = 64


@numba.njit(inline="always", **JIT)
def _larger(a, b):
    """np.maximum of two elements: the larger, or NaN when either is NaN."""
    return a if (a > b) | (a != a) else b


@numba.njit(**JIT)
def _max_plane(x, y, g, row, spans, halves):
    """y = the maximum of each window of the plane x, separably: per output row, the input
    rows its windows read are reduced to one row (whole-row selects, which LLVM vectorises),
    then each window takes the maximum of its columns of that row (``spans``: per kernel
    column, the windows that read it inside). Max is exact and NaN wins whatever the order,
    so this is the xp kernel's answer; a window wholly in the padding stays -inf, as there.
    ``row`` is scratch of the plane's width, ``halves`` of (2, ceil(width / 2))."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    height, width = x.shape
    rows = y.shape[0]
    for oh in range(rows):
        out = y[oh]
        top = oh * sh - ph
        first = 0  # the first kernel row inside
        while first < kh and top + first * dh < 0:
            first += 1
        if first == kh or top + first * dh >= height:  # (these windows lie in the padding)
            out[:] = -np.inf
            continue
        reduced = x[np.uint64(top + first * dh)]  # (one row inside: read in place)
        for jh in range(first + 1, kh):
            ih = top + jh * dh
            if ih >= height:
                break
            source = x[np.uint64(ih)]
            for w in range(width):
                row[np.uint64(w)] = _larger(source[np.uint64(w)], reduced[np.uint64(w)])
            reduced = row
        if sw == 2 and width >= HALVES_WIDTH:
            _max_columns_halves(reduced, out, pw, kw, dw, spans, halves)
        else:
            _max_columns(reduced, out, sw, pw, kw, dw, spans)


@numba.njit(inline="always", **JIT)
def _edge_max(v, base, ow, kw, dw, pw, width):
    """The maximum over window ow's columns inside the row of ``v`` at ``base``."""
    best = -np.inf
    for jw in range(kw):
        iw = ow + jw * dw - pw
        if 0 <= iw < width:
            best = _larger(v[np.uint64(base + iw)], best)
    return best


@numba.njit(**JIT)
def _max_same(x, y, g, v):
    """The stride-1 pool of planes x (P, H, W) whose output is as large as each plane (3x3
    with pads of 1, Inception's pool branch), as a few selects over the whole block: one per
    kernel row down (shifted by whole rows), one per kernel column across (by elements), each
    over every plane at once. Planes of 7x7 to 28x28 leave row-by-row loops too short to
    pay: 832 planes of 14x14 took 0.6-1.0 ms that way, 0.25-0.39 ms so. A shift reads across
    a plane's (or a row's) end only for its edge rows (columns), which are then made again
    one by one. ``v``: scratch of x's size."""
    kh, kw, _, _, dh, dw, ph, pw = g
    planes, height, width = x.shape
    size = planes * height * width
    flat_x, flat_y = x.reshape(size), y.reshape(size)
    _shifted_max(flat_x, v, kh, dh, ph, width)
    top, bottom = inside_span(kh, dh, ph, height)
    for p in range(planes):
        for oh in range(top):
            _edge_row(flat_x, v, p * height, oh, kh, dh, ph, height, width)
        for oh in range(bottom, height):
            _edge_row(flat_x, v, p * height, oh, kh, dh, ph, height, width)
    _shifted_max(v, flat_y, kw, dw, pw, 1)
    left, right = inside_span(kw, dw, pw, width)
    for r in range(planes * height):
        for ow in range(left):
            flat_y[r * width + ow] = _edge_max(v, r * width, ow, kw, dw, pw, width)
        for ow in range(right, width):
            flat_y[r * width + ow] = _edge_max(v, r * width, ow, kw, dw, pw, width)


@numba.njit(inline="always", **JIT)
def _edge_row(flat_x, v, first_row, oh, kh, dh, ph, height, width):
    """v's row oh of the plane starting at row ``first_row``: the largest of the input rows
    its windows read inside the plane."""
    at = (first_row + oh) * width
    for w in range(width):
        v[np.uint64(at + w)] = -np.inf
    for jh in range(kh):
        ih = oh + jh * dh - ph
        if 0 <= ih < height:
            source = (first_row + ih) * width
            for w in range(width):
                v[np.uint64(at + w)] = _larger(flat_x[np.uint64(source + w)],
                                               v[np.uint64(at + w)])


@numba.njit(**JIT)
def _shifted_max(source, out, taps, dilation, head, unit):
    """out[i] = the largest of source[i + (j * dilation - head) * unit] over the taps j whose
    index lies inside ``source`` (-inf where none does)."""
    size = source.shape[0]
    first = -head * unit
    lo, hi = max(0, -first), min(size, size - first)
    out[:lo] = -np.inf
    out[hi:] = -np.inf
    for i in range(lo, hi):
        out[np.uint64(i)] = source[np.uint64(i + first)]
    for j in range(1, taps):
        shift = (j * dilation - head) * unit
        for i in range(max(0, -shift), min(size, size - shift)):
            out[np.uint64(i)] = _larger(source[np.uint64(i + shift)], out[np.uint64(i)])


@numba.njit(**JIT)
def _max_columns(reduced, out, sw, pw, kw, dw, spans):
    """out[ow] = the maximum of ``reduced`` over window ow's columns inside it: the first
    kernel column assigns (the windows it misses start as padding), the others take the
    larger."""
    lo, hi = spans[0, 0], spans[0, 1]
    out[:lo] = -np.inf
    out[hi:] = -np.inf
    for ow in range(lo, hi):
        out[np.uint64(ow)] = reduced[np.uint64(ow * sw - pw)]
    for jw in range(1, kw):
        start = jw * dw - pw
        for ow in range(spans[jw, 0], spans[jw, 1]):
            out[np.uint64(ow)] = _larger(reduced[np.uint64(ow * sw + start)], out[np.uint64(ow)])


@numba.njit(**JIT)
def _max_columns_halves(reduced, out, pw, kw, dw, spans, halves):
    """``_max_columns`` at stride 2 (most CNNs' downsampling pools): the row is first split
    into its even and odd elements (one pass LLVM vectorises as interleaved loads), so that
    each kernel column reads one half at consecutive places, a vector loop, where reading
    every other element of the row was a scalar one. ``halves``: (2, ceil(width / 2))."""
    width = reduced.shape[0]
    even, odd = halves[0], halves[1]
    for i in range(width // 2):
        even[np.uint64(i)] = reduced[np.uint64(2 * i)]
        odd[np.uint64(i)] = reduced[np.uint64(2 * i + 1)]
    if width % 2:
        even[np.uint64(width // 2)] = reduced[np.uint64(width - 1)]
    lo, hi = spans[0, 0], spans[0, 1]
    out[:lo] = -np.inf
    out[hi:] = -np.inf
    for jw in range(kw):
        start = jw * dw - pw  # element 2 * ow + start is half start % 2's ow + start // 2
        half = even if start % 2 == 0 else odd
        shift = start // 2
        if jw == 0:
            for ow in range(lo, hi):
                out[np.uint64(ow)] = half[np.uint64(ow + shift)]
        else:
            for ow in range(spans[jw, 0], spans[jw, 1]):
                out[np.uint64(ow)] = _larger(half[np.uint64(ow + shift)], out[np.uint64(ow)])


@numba.njit(**JIT)
def _column_spans(g, cols, width):
    """Per kernel column: the windows [lo, hi) that read it inside a row of ``width``."""
    kw, sw, dw, pw = g[1], g[3], g[5], g[7]
    spans = np.empty((kw, 2), np.int64)
    for jw in range(kw):
        spans[jw, 0], spans[jw, 1] = span(jw * dw - pw, sw, cols, width)
    return spans


@numba.njit(**JIT)
def max_pool_serial(x, y, g):
    if same_size(x, y, g):
        _max_same(x, y, g, np.empty(x.size, x.dtype))
        return
    spans = _column_spans(g, y.shape[2], x.shape[2])
    row = np.empty(x.shape[2], x.dtype)
    halves = np.empty((2, (x.shape[2] + 1) // 2), x.dtype)
    for p in range(x.shape[0]):
        _max_plane(x[p], y[p], g, row, spans, halves)


@numba.njit(parallel=True, **JIT)
def max_pool_parallel(x, y, g):
    if same_size(x, y, g):  # (blocks of planes, a few per thread)
        blocks = min(x.shape[0], 16)
        per = -(-x.shape[0] // blocks)
        for b in numba.prange(blocks):
            lo, hi = b * per, min(x.shape[0], (b + 1) * per)
            if lo < hi:
                _max_same(x[lo:hi], y[lo:hi], g, np.empty((hi - lo) * x[0].size, x.dtype))
        return
    spans = _column_spans(g, y.shape[2], x.shape[2])
    for p in numba.prange(x.shape[0]):
        _max_plane(x[p], y[p], g, np.empty(x.shape[2], x.dtype), spans,
                   np.empty((2, (x.shape[2] + 1) // 2), x.dtype))


@numba.njit(**JIT)
def max_pool_pairs(x, y):
    """y (N, C, H/2, W/2) = the maximum of each 2x2 window of x (N, C, H, W) at stride 2, the
    windows tiling x (odd last rows or columns are read by no window)."""
    n, c, rows, cols = y.shape
    for i in range(n):
        for ch in range(c):
            for oh in range(rows):
                top, bottom, out = x[i, ch, 2 * oh], x[i, ch, 2 * oh + 1], y[i, ch, oh]
                for ow in range(cols):
                    k, k1 = np.uint64(2 * ow), np.uint64(2 * ow + 1)
                    out[np.uint64(ow)] = _larger(_larger(top[k], bottom[k]),
                                                 _larger(top[k1], bottom[k1]))


@numba.njit(**JIT)
def _argmax_plane(x, best, at, g):
    """Each window's first maximum into ``best`` and its flat position (row * width +
    column) into ``at``, -1 when it is padding.

    Offsets are visited in row-major kernel order and a later element wins only when
    strictly greater (or the first NaN), so each window keeps its first maximum. Padding
    reads as -inf: it can only be a window's answer as the window's first element, so
    windows start as padding (-inf, -1) and the first offset, where inside, is taken
    unconditionally."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    height, width = x.shape
    rows, cols = best.shape
    best[:, :] = -np.inf
    at[:, :] = -1
    for jh in range(kh):
        top = jh * dh - ph
        oh_lo, oh_hi = span(top, sh, rows, height)
        for jw in range(kw):
            start = jw * dw - pw
            lo, hi = span(start, sw, cols, width)
            first = jh == 0 and jw == 0
            for oh in range(oh_lo, oh_hi):
                ih = oh * sh + top
                row, most, where = x[np.uint64(ih)], best[oh], at[oh]
                for ow in range(lo, hi):
                    iw = ow * sw + start
                    v = row[np.uint64(iw)]
                    now = most[np.uint64(ow)]
                    take = first | (v > now) | ((v != v) & (now == now))
                    most[np.uint64(ow)] = v if take else now
                    where[np.uint64(ow)] = ih * width + iw if take else where[np.uint64(ow)]


@numba.njit(**JIT)
def _indices_plane(x, y, index, base, column_major, g):
    height, width = x.shape
    _argmax_plane(x, y, index, g)
    for oh in range(y.shape[0]):
        for ow in range(y.shape[1]):
            at = index[oh, ow]
            if at < 0:
                continue
            if column_major:
                at = (at % width) * height + at // width
            index[oh, ow] = base + at


@numba.njit(**JIT)
def max_pool_indices_serial(x, y, index, column_major, g):
    plane = x.shape[1] * x.shape[2]
    for p in range(x.shape[0]):
        _indices_plane(x[p], y[p], index[p], p * plane, column_major, g)


@numba.njit(parallel=True, **JIT)
def max_pool_indices_parallel(x, y, index, column_major, g):
    plane = x.shape[1] * x.shape[2]
    for p in numba.prange(x.shape[0]):
        _indices_plane(x[p], y[p], index[p], p * plane, column_major, g)


@numba.njit(**JIT)
def _grad_plane(dy, x, dx, g):
    """dx, a flat (height * width) plane, gets each window's dy at its first maximum."""
    best = np.empty(dy.shape, x.dtype)
    at = np.empty(dy.shape, np.int64)
    _argmax_plane(x, best, at, g)
    dx[:] = 0
    for oh in range(dy.shape[0]):
        for ow in range(dy.shape[1]):
            if at[oh, ow] >= 0:
                dx[np.uint64(at[oh, ow])] += dy[oh, ow]


@numba.njit(**JIT)
def max_pool_grad_serial(dy, x, dx, g):
    for p in range(x.shape[0]):
        _grad_plane(dy[p], x[p], dx[p], g)


@numba.njit(parallel=True, **JIT)
def max_pool_grad_parallel(dy, x, dx, g):
    for p in numba.prange(x.shape[0]):
        _grad_plane(dy[p], x[p], dx[p], g)


@numba.njit(**JIT)
def _grad_tiles(dy, x, dx, g):
    """``_grad_plane`` for windows that tile the plane (stride = kernel, no padding or
    dilation, every window inside it: LeNet's 2x2 pools): each window's first maximum is
    found in one visit of its own elements, with no scratch planes and no second pass (LeNet's
    first pool gradient, 1,280 planes of 24x24: 1.4 ms against 3.0). The same rule picks the
    same element: the first one, then only a strictly greater one or the first NaN."""
    kh, kw = g[0], g[1]
    width = x.shape[1]
    rows, cols = dy.shape
    dx[:] = 0
    for oh in range(rows):
        top = oh * kh
        for ow in range(cols):
            left = ow * kw
            now = x[np.uint64(top), np.uint64(left)]
            at = top * width + left
            for jh in range(kh):
                row = x[np.uint64(top + jh)]
                for jw in range(kw):
                    v = row[np.uint64(left + jw)]
                    if (v > now) | ((v != v) & (now == now)):
                        now = v
                        at = (top + jh) * width + left + jw
            dx[np.uint64(at)] += dy[oh, ow]


@numba.njit(**JIT)
def max_pool_grad_tiles_serial(dy, x, dx, g):
    for p in range(x.shape[0]):
        _grad_tiles(dy[p], x[p], dx[p], g)


@numba.njit(parallel=True, **JIT)
def max_pool_grad_tiles_parallel(dy, x, dx, g):
    for p in numba.prange(x.shape[0]):
        _grad_tiles(dy[p], x[p], dx[p], g)


def _tiles(geom, x_shape) -> bool:
    """Whether the windows tile the plane: stride = kernel, no padding, no dilation, and
    every window inside it (no partial window at the end, as ceil_mode can make)."""
    (kh, kw), (sh, sw) = geom.kernel, geom.strides
    return (kh == sh and kw == sw and tuple(geom.dilations) == (1, 1)
            and not any(geom.head) and geom.out[0] * kh <= x_shape[0]
            and geom.out[1] * kw <= x_shape[1])


def _planes(a):
    return a.reshape((-1,) + a.shape[2:])


def _work(y, geom) -> tuple[int, int]:
    """(planes, compares) of a pool with output type ``y``."""
    planes = y.shape[0] * y.shape[1]
    return planes, planes * geom.out[0] * geom.out[1] * geom.kernel[0] * geom.kernel[1]


def _prepare_max_pool(input_types, output_types, attrs):
    x, y = input_types[0], output_types[0]
    index = output_types[1] if len(output_types) > 1 else None
    if not floats(x, y) or (index is not None and (
            index.dtype != np.int64 or index.shape != y.shape)):
        return None
    geom = pool_geometry(x.shape[2:], attrs)
    fast = parallel(*_work(y, geom))
    if index is None and not fast and _tiles(geom, x.shape[2:]) and geom.kernel == (2, 2):
        return max_pool_pairs, None
    if index is None:
        return (max_pool_parallel if fast else max_pool_serial), window_tuple(geom)
    run = max_pool_indices_parallel if fast else max_pool_indices_serial
    return run, window_tuple(geom), bool(attrs["storage_order"])


@override(xp_max_pool, _prepare_max_pool)
def max_pool(state, ctx, inputs, outputs, attrs) -> bool:
    x, y = inputs[0], outputs[0]
    index = outputs[1] if len(outputs) > 1 else None
    if not contiguous(x, y, index):
        return False
    if index is None:
        run, g = state
        if g is None:
            run(x, y)  # (max_pool_pairs: the 4-D arrays as they are)
        else:
            run(_planes(x), _planes(y), g)
    else:
        run, g, column_major = state
        run(_planes(x), _planes(y), _planes(index), column_major, g)
    return True


def _bind_max_pool(backend, input_types, output_types, attrs):
    """The bound step: for the 2x2 pairs loop a direct call of it (about 1 us of LeNet's
    pools went to the general wrappers), otherwise the override's own bound form."""
    planned = max_pool.prepare(backend, input_types, output_types, attrs)
    state, other = planned
    if other is not None:
        return other
    if state[0] is not max_pool_pairs:
        return direct_call(max_pool.compiled_run, xp_max_pool, state)

    def max_pool_2x2(ctx, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if x.flags.c_contiguous and y.flags.c_contiguous:
            max_pool_pairs(x, y)
        else:  # (a caller's strided view)
            xp_max_pool(ctx, inputs, outputs, attrs)
    return max_pool_2x2


max_pool.bind = _bind_max_pool


def _prepare_max_pool_grad(input_types, output_types, attrs):
    dy, x, dx = input_types[0], input_types[1], output_types[0]
    if not floats(dy, x, dx):
        return None
    geom = pool_geometry(x.shape[2:], attrs)
    fast = parallel(*_work(dy, geom))
    if _tiles(geom, x.shape[2:]):
        return ((max_pool_grad_tiles_parallel if fast else max_pool_grad_tiles_serial),
                window_tuple(geom))
    return (max_pool_grad_parallel if fast else max_pool_grad_serial), window_tuple(geom)


@override(xp_max_pool_grad, _prepare_max_pool_grad)
def max_pool_grad(state, ctx, inputs, outputs, attrs) -> bool:
    dy, x = inputs
    dx = outputs[0]
    if not contiguous(dy, x, dx):
        return False
    run, g = state
    run(_planes(dy), _planes(x), dx.reshape(dx.shape[0] * dx.shape[1], -1), g)
    return True


kernels = {"MaxPool": max_pool, "portable.MaxPoolGrad": max_pool_grad}
