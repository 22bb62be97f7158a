"""Compiled weight gradient of a dense 2-D Conv: dot products of shifted runs, no im2col.

dW[m, c, jh, jw] = sum over images and output pixels (r, q) of dY[m, r, q] times the input
element the tap (jh, jw) of window (r, q) reads. The xp kernel copies every input element
kh * kw times into columns and hands them to sgemm, which packs them again. Here each input
plane is split once into stride phases (at stride 1 one phase: the zero-padded plane), every
phase ``wide`` columns wide, and dY is copied once into rows of the same width (zeros past
its ``ow`` columns). The taps of one phase are then shifts of one run: tap (jh, jw) reads

    phase[(r + jh * dh // sh) * wide + q + jw * dw // sw],

so with both copies flattened the sum over the pixels of an image is one dot product of two
contiguous runs of ``oh * wide`` elements (the extra columns of dY are zero, which also
cancels what the shifted run reads from the next row). ``grad_weight_tiles`` computes them 4
output channels by 4 (channel, tap) pairs at a time, 16 sums in registers, image by image
(one image's copies stay in L2 across its tiles), with LLVM vectorising along the run
(``fastmath`` reassoc and contract, as ``stacked_conv.window_products``). The copies hold
the input and dY once each: no kh * kw blow-up and no packing.

On small planes an image's runs are short (24 elements on a 4x4 plane) and the reduction of
the 16 vector sums after each run costs as much as the run. There ``batch_run_tiles`` sums
one run over the whole batch instead: ``copy_rows`` lays out, per kernel row jh, the input
rows that row reads for every output row of every image, one after another (kh copies of
the input, column phases only), so that tap (jh, jw) of the whole batch is one run shifted
by ``jw * dw // sw``, against dY's rows of all images in the same order.

The extra columns multiply input values by dY's zeros: an infinite input value there makes
NaN where the xp kernel's sum has none (as a weight of inf does in ``depthwise.conv_wide``).
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.stacked_conv import store4
from backends.numpy.jit.support import JIT

_PRODUCT_JIT = dict(JIT, fastmath={"reassoc", "contract"})


def phase_layout(kernel, strides, dilations, out):
    """(rows, wide, taps): the phase planes' shape and, per tap (jh, jw) in C order,
    (phase index, offset of its run in the flat phase plane). A plane has one row more
    than the shifted runs reach: the last run's extra columns read past its last row."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dilations, out
    shift_h = [(j * dh) // sh for j in range(kh)]
    shift_w = [(j * dw) // sw for j in range(kw)]
    wide = ow + max(shift_w)
    rows = oh + max(shift_h) + 1
    taps = np.empty((kh * kw, 2), np.int64)
    for jh in range(kh):
        for jw in range(kw):
            phase = ((jh * dh) % sh) * sw + (jw * dw) % sw
            taps[jh * kw + jw] = phase, shift_h[jh] * wide + shift_w[jw]
    return rows, wide, taps


@numba.njit(**JIT)
def split_phases(x, phases, used, g):
    """phases (S, N, C, rows * wide)[a * sw + b, i, c, u * wide + v] = x[i, c, u * sh + a - ph,
    v * sw + b - pw] (zero outside the image), for the phases marked in ``used``."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    n, c, height, width = x.shape
    rows, wide = phases.shape[3], phases.shape[4]
    zero = x.dtype.type(0)
    for a in range(sh):
        for b in range(sw):
            s = a * sw + b
            if not used[s]:
                continue
            for i in range(n):
                for ch in range(c):
                    plane, image = phases[s, i, ch], x[i, ch]
                    for u in range(rows):
                        src = u * sh + a - ph
                        out = plane[u]
                        if src < 0 or src >= height:
                            for v in range(wide):
                                out[v] = zero
                            continue
                        row = image[src]
                        for v in range(wide):
                            col = v * sw + b - pw
                            out[v] = row[col] if 0 <= col < width else zero


@numba.njit(**JIT)
def widen_rows(dy, wide_dy):
    """wide_dy (N, M, oh, wide) = dy (N, M, oh, ow) with zero columns past ``ow``."""
    n, m, oh, ow = dy.shape
    wide = wide_dy.shape[3]
    zero = dy.dtype.type(0)
    for i in range(n):
        for o in range(m):
            for r in range(oh):
                src, out = dy[i, o, r], wide_dy[i, o, r]
                for q in range(ow):
                    out[np.uint64(q)] = src[np.uint64(q)]
                for q in range(ow, wide):
                    out[q] = zero


@numba.njit(**_PRODUCT_JIT)
def grad_weight_tiles(wide_dy, phases, taps, dw, zero):
    """dw (M, C * kh * kw) = the dot products of dY's runs with the shifted phase runs,
    summed over images; columns k = c * taps + tap. 4 x 4 tiles; a last short block repeats
    its first row or column (computed, not stored)."""
    n, m, run = wide_dy.shape
    plane = phases.shape[3] * phases.shape[4]  # (rows * wide)
    per_image = phases.shape[2] * plane
    k = dw.shape[1]
    flat_dy = wide_dy.reshape(-1)
    flat_x = phases.reshape(-1)
    image_x = n * per_image  # (one phase's block)
    dw[:, :] = zero
    for i in range(n):  # (images outer: one image's copies stay in L2 across its tiles)
        dy_at = np.uint64(i * m * run)
        x_at = np.uint64(i * per_image)
        for m0 in range(0, m, 4):
            mn = min(4, m - m0)
            d0 = dy_at + np.uint64(m0 * run)
            d1 = dy_at + np.uint64((m0 + 1) * run if mn > 1 else m0 * run)
            d2 = dy_at + np.uint64((m0 + 2) * run if mn > 2 else m0 * run)
            d3 = dy_at + np.uint64((m0 + 3) * run if mn > 3 else m0 * run)
            for k0 in range(0, k, 4):
                kn = min(4, k - k0)
                e0 = x_at + np.uint64(_run_start(taps, k0, image_x, plane))
                e1 = x_at + np.uint64(_run_start(taps, k0 + 1 if kn > 1 else k0, image_x, plane))
                e2 = x_at + np.uint64(_run_start(taps, k0 + 2 if kn > 2 else k0, image_x, plane))
                e3 = x_at + np.uint64(_run_start(taps, k0 + 3 if kn > 3 else k0, image_x, plane))
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
                s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
                for j in range(run):
                    u = np.uint64(j)
                    a0, a1 = flat_dy[d0 + u], flat_dy[d1 + u]
                    a2, a3 = flat_dy[d2 + u], flat_dy[d3 + u]
                    v0, v1 = flat_x[e0 + u], flat_x[e1 + u]
                    v2, v3 = flat_x[e2 + u], flat_x[e3 + u]
                    s00 += a0 * v0
                    s01 += a0 * v1
                    s02 += a0 * v2
                    s03 += a0 * v3
                    s10 += a1 * v0
                    s11 += a1 * v1
                    s12 += a1 * v2
                    s13 += a1 * v3
                    s20 += a2 * v0
                    s21 += a2 * v1
                    s22 += a2 * v2
                    s23 += a2 * v3
                    s30 += a3 * v0
                    s31 += a3 * v1
                    s32 += a3 * v2
                    s33 += a3 * v3
                _add(dw[m0], k0, kn, s00, s01, s02, s03)
                if mn > 1:
                    _add(dw[m0 + 1], k0, kn, s10, s11, s12, s13)
                if mn > 2:
                    _add(dw[m0 + 2], k0, kn, s20, s21, s22, s23)
                if mn > 3:
                    _add(dw[m0 + 3], k0, kn, s30, s31, s32, s33)


@numba.njit(inline="always", **JIT)
def _run_start(taps, k, image_x, plane):
    """Where column k's run (channel k // taps, tap k % taps) starts in image 0's phases."""
    ntaps = taps.shape[0]
    t = k % ntaps
    return taps[t, 0] * image_x + (k // ntaps) * plane + taps[t, 1]


@numba.njit(inline="always", **JIT)
def _add(row, k0, kn, s0, s1, s2, s3):
    row[k0] += s0
    if kn > 1:
        row[k0 + 1] += s1
    if kn > 2:
        row[k0 + 2] += s2
    if kn > 3:
        row[k0 + 3] += s3


# -- small planes: one run over the whole batch ----------------------------------------------


def row_layout(kernel, strides, dilations, channels: int, batch: int, out):
    """(wide, block, starts) of ``copy_rows``' layout: its rows ``wide`` columns wide, one
    block of ``batch * oh`` rows (and one slack row) per (column phase, channel, kernel row),
    and where the run of each column k = (c, jh, jw) of dW starts in the flat copy."""
    (kh, kw), sw, dw_, (oh, ow) = kernel, strides[1], dilations[1], out
    shift = [(j * dw_) // sw for j in range(kw)]
    wide = ow + max(shift)
    block = (batch * oh + 1) * wide
    starts = np.empty(channels * kh * kw, np.int64)
    for c in range(channels):
        for jh in range(kh):
            for jw in range(kw):
                phase = (jw * dw_) % sw
                starts[(c * kh + jh) * kw + jw] = (
                    ((phase * channels + c) * kh + jh) * block + shift[jw])
    return wide, block, starts


@numba.njit(**JIT)
def copy_rows(x, rows, used, g):
    """rows (Sw, C, kh, N * oh + 1, wide)[b, c, jh, i * oh + r, v] = x[i, c, r * sh + jh * dh
    - ph, v * sw + b - pw] (zero outside the image; the last row zero), for the column
    phases b marked in ``used``: each kernel row's input rows, one after another over the
    batch, so that tap (jh, jw) of every window of the batch is one shifted run."""
    kh, kw, sh, sw, dh, dw, ph, pw = g
    n, c, height, width = x.shape
    oh, wide = (rows.shape[3] - 1) // n, rows.shape[4]
    zero = x.dtype.type(0)
    for b in range(sw):
        if not used[b]:
            continue
        for ch in range(c):
            for jh in range(kh):
                block = rows[b, ch, jh]
                for v in range(wide):
                    block[n * oh, v] = zero
                for i in range(n):
                    image = x[i, ch]
                    for r in range(oh):
                        src, out = r * sh + jh * dh - ph, block[i * oh + r]
                        if src < 0 or src >= height:
                            for v in range(wide):
                                out[v] = zero
                            continue
                        row = image[src]
                        for v in range(wide):
                            col = v * sw + b - pw
                            out[v] = row[col] if 0 <= col < width else zero


@numba.njit(**JIT)
def widen_rows_by_channel(dy, wide_dy):
    """wide_dy (M, N, oh, wide) = dy (N, M, oh, ow) with zero columns past ``ow``."""
    n, m, oh, ow = dy.shape
    wide = wide_dy.shape[3]
    zero = dy.dtype.type(0)
    for o in range(m):
        for i in range(n):
            for r in range(oh):
                src, out = dy[i, o, r], wide_dy[o, i, r]
                for q in range(ow):
                    out[np.uint64(q)] = src[np.uint64(q)]
                for q in range(ow, wide):
                    out[q] = zero


@numba.njit(**_PRODUCT_JIT)
def batch_run_tiles(wide_dy, rows, starts, dw, zero):
    """dw (M, K) = wide_dy (M, run) . the runs of ``rows`` at ``starts`` (K): one dot product
    per element over the whole batch, 4 x 4 at a time; output channels in groups of 16, so
    that each X run is read 4 times from L1 while the group's dY runs stay in L2."""
    m, run = wide_dy.shape
    k = dw.shape[1]
    flat_dy = wide_dy.reshape(-1)
    flat_x = rows.reshape(-1)
    for g0 in range(0, m, 8):
        for k0 in range(0, k, 4):
            kn = min(4, k - k0)
            e0 = np.uint64(starts[k0])
            e1 = np.uint64(starts[k0 + 1 if kn > 1 else k0])
            e2 = np.uint64(starts[k0 + 2 if kn > 2 else k0])
            e3 = np.uint64(starts[k0 + 3 if kn > 3 else k0])
            for m0 in range(g0, min(g0 + 8, m), 4):
                mn = min(4, m - m0)
                d0 = np.uint64(m0 * run)
                d1 = np.uint64((m0 + 1 if mn > 1 else m0) * run)
                d2 = np.uint64((m0 + 2 if mn > 2 else m0) * run)
                d3 = np.uint64((m0 + 3 if mn > 3 else m0) * run)
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
                s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
                for j in range(run):
                    u = np.uint64(j)
                    a0, a1 = flat_dy[d0 + u], flat_dy[d1 + u]
                    a2, a3 = flat_dy[d2 + u], flat_dy[d3 + u]
                    v0, v1 = flat_x[e0 + u], flat_x[e1 + u]
                    v2, v3 = flat_x[e2 + u], flat_x[e3 + u]
                    s00 += a0 * v0
                    s01 += a0 * v1
                    s02 += a0 * v2
                    s03 += a0 * v3
                    s10 += a1 * v0
                    s11 += a1 * v1
                    s12 += a1 * v2
                    s13 += a1 * v3
                    s20 += a2 * v0
                    s21 += a2 * v1
                    s22 += a2 * v2
                    s23 += a2 * v3
                    s30 += a3 * v0
                    s31 += a3 * v1
                    s32 += a3 * v2
                    s33 += a3 * v3
                dw[m0, k0] = s00
                if kn > 1:
                    dw[m0, k0 + 1] = s01
                if kn > 2:
                    dw[m0, k0 + 2] = s02
                if kn > 3:
                    dw[m0, k0 + 3] = s03
                if mn > 1:
                    store4(dw[m0 + 1], k0, kn, s10, s11, s12, s13)
                if mn > 2:
                    store4(dw[m0 + 2], k0, kn, s20, s21, s22, s23)
                if mn > 3:
                    store4(dw[m0 + 3], k0, kn, s30, s31, s32, s33)

