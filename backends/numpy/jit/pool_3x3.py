"""The most common pooling windows in fused passes: MaxPool and AveragePool 3x3 at stride 2
(the downsampling pools of SqueezeNet, GoogLeNet, Inception and ResNet stems, ShuffleNet's
shortcuts) and at stride 1 keeping the size (Inception's pool branches); any padding,
dilation 1.

The general loops (``max_pool_forward._max_plane`` and ``_max_same``, ``average_pool._sum_same``)
reduce one kernel row or column per pass, each pass a load and a store of a whole row or
block. Here one pass reads all three rows or columns at once.

MaxPool takes plain maxima (one instruction a lane) where the general loops take each one as
a NaN-aware select (``_larger``: two compares, an or and a blend), while an or of ``v != v``
over the elements read notes whether any is NaN. A plane (a block of planes, at stride 1)
that read one runs again through the general NaN-aware loop, so the answer is always the xp
kernel's: NaN wins, else the largest. AveragePool adds in the general loop's order (kernel
rows, then columns, in order), so its sums are the same to the bit, and divides in the
input's type, as the xp kernel does (the general loop divides in float64, three times slower
with 16 lanes: 576 planes of 14x14 took 0.10 ms so, 0.06 ms in float32).

At stride 2 a row of column maxima is split into its even and odd elements, so that each
window's three columns are three consecutive reads (even[o], odd[o], even[o + 1] without
padding): a loop LLVM vectorises, where reading every other element is a scalar one.
At stride 1 the planes are one flat array: the vertical pass takes x[i - W], x[i], x[i + W]
for every i at once, the horizontal one v[i - 1], v[i], v[i + 1]; then the first and last row
of each plane, and the first and last column of each row, which those shifts read across an
edge, are made again from what lies inside.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.support import JIT


def takes(g, x_shape, y_shape) -> bool:
    """Whether these loops run a pool of geometry ``g`` (``window_tuple``) from planes of
    ``x_shape`` (H, W) to ``y_shape``: 3x3 windows, dilation 1, and stride 2, or stride 1
    with an output as large as the input (at least 2x2: pads of 1 all round)."""
    kh, kw, sh, sw, dh, dw = g[:6]
    if (kh, kw, dh, dw) != (3, 3, 1, 1):
        return False
    if (sh, sw) == (2, 2):
        return True
    return ((sh, sw) == (1, 1) and tuple(g[6:8]) == (1, 1) and min(x_shape) >= 2
            and tuple(x_shape) == tuple(y_shape))


@numba.njit(inline="always", **JIT)
def _max3(a, b, c):
    return max(max(a, b), c)


@numba.njit(inline="always", **JIT)
def _nan3(a, b, c):
    return (a != a) | (b != b) | (c != c)


@numba.njit(**JIT)
def _edge_rows(x, top, v) -> bool:
    """v = the maximum over the rows top, top + 1, top + 2 of the plane x that lie inside
    it, for an output row whose window reaches over an edge (-inf where no row is inside);
    whether one of them holds a NaN."""
    height, width = x.shape
    bad = False
    v[:] = -np.inf
    for ih in range(max(top, 0), min(top + 3, height)):
        row = x[np.uint64(ih)]
        for w in range(width):
            u = np.uint64(w)
            a = row[u]
            v[u] = max(v[u], a)
            bad |= a != a
    return bad


@numba.njit(inline="always", **JIT)
def _half_taps(halves, pw, width, cols):
    """Where the three columns of each stride-2 window lie once a row is split into its
    even and odd halves: window ow reads column 2 * ow - pw + j, which is half (j - pw) % 2
    at place ow + (j - pw) // 2. Returns (the half of columns 0 and 2, the half of column
    1, the three shifts, and [lo, hi): the windows wholly inside the row)."""
    even, odd = halves[0], halves[1]
    first = even if pw % 2 == 0 else odd
    second = odd if pw % 2 == 0 else even
    lo = min(cols, (pw + 1) // 2)
    hi = max(lo, min(cols, (width - 3 + pw) // 2 + 1))
    return first, second, (-pw) // 2, (1 - pw) // 2, (2 - pw) // 2, lo, hi


@numba.njit(inline="always", **JIT)
def _split_halves(v, halves, width):
    """halves[0], halves[1] = the even and odd elements of v[:width] (an odd width's last
    element goes to the even half)."""
    even, odd = halves[0], halves[1]
    for i in range(width // 2):
        even[np.uint64(i)] = v[np.uint64(2 * i)]
        odd[np.uint64(i)] = v[np.uint64(2 * i + 1)]
    if width % 2:
        even[np.uint64(width // 2)] = v[np.uint64(width - 1)]


@numba.njit(**JIT)
def stride2_block(x, y, pads, v, halves, redo) -> None:
    """y (P, rows, cols) = the 3x3 stride-2 maxima of planes x (P, H, W) with pads (top,
    left); ``redo[p]`` is set where plane p held a NaN (y[p] is then to be made again).
    ``v``: scratch of W, ``halves``: of (2, W // 2 + 1). One function for all the planes: a
    call per plane made the loop 30-40% slower."""
    ph, pw = pads
    planes, height, width = x.shape
    rows, cols = y.shape[1], y.shape[2]
    first, second, s0, s1, s2, lo, hi = _half_taps(halves, pw, width, cols)
    for p in range(planes):
        plane, image = x[p], y[p]
        bad = False
        for oh in range(rows):
            top = 2 * oh - ph
            if top >= 0 and top + 2 < height:
                r0, r1 = plane[np.uint64(top)], plane[np.uint64(top + 1)]
                r2 = plane[np.uint64(top + 2)]
                for w in range(width):
                    u = np.uint64(w)
                    a, b, c = r0[u], r1[u], r2[u]
                    v[u] = _max3(a, b, c)
                    bad |= _nan3(a, b, c)
            else:
                bad |= _edge_rows(plane, top, v)
            _split_halves(v, halves, width)
            out = image[np.uint64(oh)]
            for ow in range(lo, hi):
                out[np.uint64(ow)] = _max3(first[np.uint64(ow + s0)],
                                           second[np.uint64(ow + s1)],
                                           first[np.uint64(ow + s2)])
            for ow in range(lo):
                out[ow] = _edge_window(v, 2 * ow - pw, width)
            for ow in range(hi, cols):
                out[ow] = _edge_window(v, 2 * ow - pw, width)
        redo[p] = bad


@numba.njit(inline="always", **JIT)
def _edge_window(v, left, width):
    """The maximum of v[left:left + 3] inside [0, width) (-inf when none is)."""
    best = -np.inf
    for c in range(max(left, 0), min(left + 3, width)):
        best = max(best, v[np.uint64(c)])
    return best


@numba.njit(**JIT)
def same_block(x, y, v) -> bool:
    """y = the 3x3 stride-1 maxima of planes x (P, H, W) with pads of 1 (y as large as x),
    as two passes over the flat block; returns whether x held a NaN. ``v``: scratch of
    x.size."""
    planes, height, width = x.shape
    plane, size = height * width, x.size
    flat_x, flat_y = x.reshape(size), y.reshape(size)
    bad = False
    for i in range(width, size - width):  # (each element is the middle one once)
        a, b, c = flat_x[np.uint64(i - width)], flat_x[np.uint64(i)], flat_x[np.uint64(i + width)]
        v[np.uint64(i)] = _max3(a, b, c)
        bad |= b != b
    for p in range(planes):  # the first and last row of each plane: two rows inside
        top, bottom = p * plane, p * plane + plane - width
        for w in range(width):
            a, b = flat_x[np.uint64(top + w)], flat_x[np.uint64(top + width + w)]
            v[np.uint64(top + w)] = max(a, b)
            c, d = flat_x[np.uint64(bottom - width + w)], flat_x[np.uint64(bottom + w)]
            v[np.uint64(bottom + w)] = max(c, d)
            bad |= (a != a) | (d != d)
    for i in range(1, size - 1):
        flat_y[np.uint64(i)] = _max3(v[np.uint64(i - 1)], v[np.uint64(i)], v[np.uint64(i + 1)])
    for r in range(planes * height):  # the first and last column of each row
        left, right = r * width, r * width + width - 1
        flat_y[np.uint64(left)] = max(v[np.uint64(left)], v[np.uint64(left + 1)])
        flat_y[np.uint64(right)] = max(v[np.uint64(right - 1)], v[np.uint64(right)])
    return bad


@numba.njit(**JIT)
def same_block_mean(x, y, divisor, v) -> None:
    """y = the 3x3 stride-1 means of planes x (P, H, W) with pads of 1 (y as large as x): the
    sums as ``same_block`` takes maxima, each divided by its window's ``divisor`` (H, W, in
    x's type). ``v``: scratch of x.size."""
    planes, height, width = x.shape
    plane, size = height * width, x.size
    flat_x, flat_y, flat_d = x.reshape(size), y.reshape(size), divisor.reshape(plane)
    for i in range(width, size - width):
        v[np.uint64(i)] = (flat_x[np.uint64(i - width)] + flat_x[np.uint64(i)]) + flat_x[
            np.uint64(i + width)]
    for p in range(planes):
        top, bottom = p * plane, p * plane + plane - width
        for w in range(width):
            v[np.uint64(top + w)] = flat_x[np.uint64(top + w)] + flat_x[np.uint64(top + width + w)]
            v[np.uint64(bottom + w)] = (flat_x[np.uint64(bottom - width + w)]
                                        + flat_x[np.uint64(bottom + w)])
    for p in range(planes):
        base = p * plane
        for i in range(1, plane - 1):
            at = np.uint64(base + i)
            flat_y[at] = ((v[at - np.uint64(1)] + v[at]) + v[at + np.uint64(1)]) / flat_d[
                np.uint64(i)]
        for r in range(height):  # the first and last column of each row
            left, right = r * width, r * width + width - 1
            flat_y[np.uint64(base + left)] = (v[np.uint64(base + left)] + v[
                np.uint64(base + left + 1)]) / flat_d[np.uint64(left)]
            flat_y[np.uint64(base + right)] = (v[np.uint64(base + right - 1)] + v[
                np.uint64(base + right)]) / flat_d[np.uint64(right)]


@numba.njit(inline="always", **JIT)
def _edge_sum(v, left, width):
    """The sum of v[left:left + 3] inside [0, width), in order."""
    total = v.dtype.type(0)
    for c in range(max(left, 0), min(left + 3, width)):
        total += v[np.uint64(c)]
    return total


@numba.njit(**JIT)
def stride2_block_mean(x, y, pads, divisor, v, halves) -> None:
    """y (P, rows, cols) = the 3x3 stride-2 means of planes x (P, H, W) with pads (top,
    left), as ``stride2_block`` takes maxima: the rows inside summed in kernel order, then
    the columns, divided by ``divisor`` (rows, cols, in x's type): ShuffleNet's shortcut
    pools."""
    ph, pw = pads
    planes, height, width = x.shape
    rows, cols = y.shape[1], y.shape[2]
    first, second, s0, s1, s2, lo, hi = _half_taps(halves, pw, width, cols)
    for p in range(planes):
        plane, image = x[p], y[p]
        for oh in range(rows):
            top = 2 * oh - ph
            if top >= 0 and top + 2 < height:
                r0, r1 = plane[np.uint64(top)], plane[np.uint64(top + 1)]
                r2 = plane[np.uint64(top + 2)]
                for w in range(width):
                    u = np.uint64(w)
                    v[u] = (r0[u] + r1[u]) + r2[u]
            else:  # (an edge row: the rows inside, in order)
                v[:] = 0
                for ih in range(max(top, 0), min(top + 3, height)):
                    row = plane[np.uint64(ih)]
                    for w in range(width):
                        v[np.uint64(w)] += row[np.uint64(w)]
            _split_halves(v, halves, width)
            out, share = image[np.uint64(oh)], divisor[np.uint64(oh)]
            for ow in range(lo, hi):
                k = np.uint64(ow)
                out[k] = ((first[np.uint64(ow + s0)] + second[np.uint64(ow + s1)])
                          + first[np.uint64(ow + s2)]) / share[k]
            for ow in range(lo):
                out[ow] = _edge_sum(v, 2 * ow - pw, width) / share[ow]
            for ow in range(hi, cols):
                out[ow] = _edge_sum(v, 2 * ow - pw, width) / share[ow]
