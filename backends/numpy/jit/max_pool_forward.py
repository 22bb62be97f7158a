"""The maximum of each window of a 2-D NCHW MaxPool (no Indices): the loops over planes.

Arrays are seen as planes (N * C, H, W). The maximum alone is taken separably (``_max_plane``):
per output row, the input rows its windows read are reduced to one row, then each window
takes the largest of its columns there, the runs of windows that read a column inside found
once (no per-element bounds test, nothing padded or copied: the xp kernel copies every window
out, im2col). At stride 2 a wide reduced row is split into its even and odd halves first,
so that each kernel column reads consecutive places. A stride-1 pool as large as its input
(Inception's pool branch) runs each kernel row and column as one pass over all its planes at
once (``_max_same``). 3x3 windows at stride 2, or at stride 1 keeping the size, take fused
loops of their own (``pool_3x3``), with this module's loops as their NaN-aware fallback.

A 2x2 pool at stride 2 whose windows tile the plane (LeNet's, most CNNs' downsampling) takes a
loop of its own, ``max_pool_pairs``: each output is the maximum of two pairs, read once, on
the 4-D arrays themselves. LeNet's first pool at batch 1 ((1, 6, 28, 28)) went from 3.7 to
about 1 us: the general loop's four passes over the output for its four offsets took 2.3 us,
the plane views and the wrappers around it 1.4.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.pool_3x3 import same_block, stride2_block
from backends.numpy.jit.support import JIT, inside_span, same_size, span


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


@numba.njit(**JIT)
def _block_3x3(x, y, g):
    """Planes x (P, H, W) into y through ``pool_3x3.stride2_block``; a plane that held a NaN
    again through ``_max_plane`` (the fused loop's plain maxima may have dropped it)."""
    v = np.empty(x.shape[2], x.dtype)
    halves = np.empty((2, x.shape[2] // 2 + 1), x.dtype)
    redo = np.zeros(x.shape[0], np.bool_)
    stride2_block(x, y, (g[6], g[7]), v, halves, redo)
    for p in range(x.shape[0]):
        if redo[p]:
            _max_plane(x[p], y[p], g, v, _column_spans(g, y.shape[2], x.shape[2]), halves)


@numba.njit(**JIT)
def max_pool_3x3_serial(x, y, g):
    """``max_pool_serial`` for the windows ``pool_3x3.takes``."""
    if g[2] == 1:
        v = np.empty(x.size, x.dtype)
        if same_block(x, y, v):
            _max_same(x, y, g, v)
        return
    _block_3x3(x, y, g)


@numba.njit(parallel=True, **JIT)
def max_pool_3x3_parallel(x, y, g):
    blocks = min(x.shape[0], 16)  # (blocks of planes, a few per thread)
    per = -(-x.shape[0] // blocks)
    for b in numba.prange(blocks):
        lo, hi = b * per, min(x.shape[0], (b + 1) * per)
        if lo < hi and g[2] == 1:
            v = np.empty((hi - lo) * x[0].size, x.dtype)
            if same_block(x[lo:hi], y[lo:hi], v):
                _max_same(x[lo:hi], y[lo:hi], g, v)
        elif lo < hi:
            _block_3x3(x[lo:hi], y[lo:hi], g)


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
