"""Compiled MaxPool (with and without Indices) and portable.MaxPoolGrad, 2-D NCHW.

The maximum alone is taken by the loops of ``max_pool_forward`` (separable passes over each
plane; fused ones for 3x3 windows in ``pool_3x3``; a loop of its own for 2x2 windows that
tile the plane, ``max_pool_pairs``, to which the step is bound directly: ``bind``).

Indices and the gradient need each window's *first* maximum: beside each running maximum the
loop keeps its position, taken over only by a strictly greater element, exactly as the xp
kernel's argmax over the padded windows: padding reads as -inf with index -1, a NaN wins over
numbers and the first NaN stays. So even a window whose maximum is -inf (or that lies in the
padding) gets the same index there.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.max_pool_forward import (max_pool_3x3_parallel, max_pool_3x3_serial,
                                              max_pool_pairs, max_pool_parallel,
                                              max_pool_serial)
from backends.numpy.jit.pool_3x3 import takes as takes_3x3
from backends.numpy.jit.support import (JIT, contiguous, direct_call, floats, override,
                                        parallel, span, tiles, window_tuple)
from backends.xp.kernels.conv import max_pool as xp_max_pool
from backends.xp.kernels.conv import max_pool_grad as xp_max_pool_grad
from portable.ops.conv import pool_geometry


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
    if index is None and not fast and tiles(geom, x.shape[2:]) and geom.kernel == (2, 2):
        return max_pool_pairs, None
    if index is None:
        g = window_tuple(geom)
        if takes_3x3(g, x.shape[2:], y.shape[2:]):
            return (max_pool_3x3_parallel if fast else max_pool_3x3_serial), g
        return (max_pool_parallel if fast else max_pool_serial), g
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
    if tiles(geom, x.shape[2:]):
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
