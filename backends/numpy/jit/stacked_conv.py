"""Compiled dense Conv on row-stacked windows: dot products read straight from a copy of the
input that holds each window as one contiguous run, with no im2col and no packing per call.

im2col copies every input element kh * kw times and then hands the columns to sgemm, which
packs both operands again; on the small images of batch-1 inference that copy and the
packing cost as much as the products (a 3x3 Conv of 128 channels on 4x4: 11 + 50 us). Here
the input is copied once into ``t`` (oh, Wt, kh, C), where

    t[r, q', jh, c] = x[c, r * sh + jh * dh - ph, q' - pw]   (zero outside the image),

so that for kernel columns of dilation 1 the window of output pixel (r, q) is the single run
``t[r, q * sw : q * sw + kw]`` of ``kw * kh * C`` elements, and the weights, reordered once to
(M, kw, kh, C), are runs of the same order: each output value is one dot product of two
contiguous runs. ``window_products`` computes them 4 output channels by 4 pixels at a time
(16 sums in registers, LLVM vectorising along the run with ``fastmath`` reassoc and
contract, as ``recurrent_math.matmul_nt`` does), so the input copy is kh times the input
instead of kh * kw times, and nothing is packed.

The copy goes through an NHWC transpose of the image (``nhwc``), whose C-runs are then copied
kh times: 10 us for 16 channels of 32x32 against 32 us gathering straight from NCHW.

The reordered weights are kept by the plan and reused while the plan hands the same read-only
array (a graph's initializers are frozen read-only, ``portable.ir.graph.Graph``); a weight
that may change (a writeable array: a trained parameter, a caller's input) is reordered on
every call.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from backends.numpy.jit.support import JIT, read_only
from backends.xp.kernels.im2col import mark_border, scratch

_PRODUCT_JIT = dict(JIT, fastmath={"reassoc", "contract"})
# ``window_products`` goes over the pixels in chunks once the stacked copy is past
# ``RESIDENT_ELEMENTS`` (16 MB of float32: it no longer stays in the last-level cache while
# every 4 channels read it again), each chunk ``CHUNK_ELEMENTS`` of the copy (128 KB of
# float32, in L2 while all channels go over it). Measured at one thread, batch 1, 3x3 pad 1,
# ms (one chunk / chunks of 128 KB / onnxruntime): 64 of 224x224 (a 39 MB copy) 109-121 /
# 57-63 / 38-42; 128 of 112x112 (20 MB) 100 / 44-50 / 35-39. Where the copy stays in cache
# chunks lost, since every chunk reads all the weights again (512 of 28x28: 41 / 63, 256 of
# 56x56: 42 / 47).
RESIDENT_ELEMENTS = 1 << 22
CHUNK_ELEMENTS = 1 << 15


@numba.njit(**JIT)
def stack_rows(x, i, nhwc, t, g):
    """t (oh, Wt, kh, C) from image ``i`` of x (N, C, H, W): t[r, q', jh, :] = row
    r * sh + jh * dh - ph of the image, shifted right by pw, as C-runs (zero outside).
    ``nhwc`` (H, W, C) is scratch for the transposed image. ``g`` is (kh, kw, sh, sw, dh,
    dw, ph, pw, oh, ow)."""
    kh, _, sh, _, dh, _, ph, pw, oh, _ = g
    _, c, h, w = x.shape
    wide = t.shape[1]
    zero = x.dtype.type(0)
    flat = nhwc.reshape(-1)
    if c >= 256 and h * w >= 128:
        _transpose_blocked(x, i, flat)
    else:
        for r in range(h):
            for ch in range(c):
                row = x[i, ch, r]
                base = r * w * c + ch
                for q in range(w):
                    flat[np.uint64(base + q * c)] = row[np.uint64(q)]
    right = min(wide, pw + w)  # (past it, and before pw, the runs are border zeros)
    out = t.reshape(-1)
    for r in range(oh):
        for jh in range(kh):
            src = r * sh + jh * dh - ph
            left, stop = (pw, right) if 0 <= src < h else (wide, wide)
            at = (r * wide * kh + jh) * c  # (run q starts at at + q * kh * c)
            for q in range(left):
                _fill(out, at + q * kh * c, c, zero)
            for q in range(left, stop):
                start, pixel = at + q * kh * c, (src * w + q - pw) * c
                for ch in range(c):
                    out[np.uint64(start + ch)] = flat[np.uint64(pixel + ch)]
            for q in range(stop, wide):
                _fill(out, at + q * kh * c, c, zero)


@numba.njit(**JIT)
def _transpose_blocked(x, i, flat):
    """flat (H * W * C) = image ``i`` of x (N, C, H, W) as HWC, 16 channels at a time: on
    large images of many channels the row-by-row copy writes each element to another cache
    line (1,040 against 294 us for 256 channels of 56x56; 349 against 73 for 1,024 of 14x14);
    on small ones it is the faster (4 against 11 us for 16 of 32x32)."""
    _, c, h, w = x.shape
    plane = h * w
    src = x[i].reshape(-1)
    for r in range(h):
        for c0 in range(0, c, 16):
            count = min(16, c - c0)
            for q in range(w):
                base, at = (r * w + q) * c + c0, c0 * plane + r * w + q
                for j in range(count):
                    flat[np.uint64(base + j)] = src[np.uint64(at + j * plane)]


@numba.njit(inline="always", **JIT)
def _fill(out, start, count, value):
    for ch in range(count):
        out[np.uint64(start + ch)] = value


@numba.njit(**JIT)
def reorder_weights(w, packed):
    """packed (M, kw * kh * C)[m, (jw, jh, c)] = w (M, C, kh, kw)[m, c, jh, jw]."""
    m, c, kh, kw = w.shape
    for o in range(m):
        out = packed[o]
        t = 0
        for jw in range(kw):
            for jh in range(kh):
                for ch in range(c):
                    out[np.uint64(t)] = w[o, ch, jh, jw]
                    t += 1


@numba.njit(**_PRODUCT_JIT)
def window_products(t, packed, out, sw, ow, zero, chunk):
    """out (M, oh * ow)[m, p] = packed[m] . (the window run of pixel p in ``t``), 4 channels by
    4 pixels at a time; a last block of fewer repeats its first row (computed, not stored).
    Pixels go in runs of ``chunk`` (:func:`pixel_chunk`), every channel over one run before
    the next."""
    oh, wide, kh, c = t.shape
    m, k = packed.shape
    flat = t.reshape(-1)
    pixels = oh * ow
    step = sw * kh * c  # (from one pixel's window to the next along a row)
    row_len = wide * kh * c
    for first in range(0, pixels, chunk):
        last = min(pixels, first + chunk)
        _chunk_products(flat, packed, out, first, last, ow, step, row_len, m, k, zero)


@numba.njit(**JIT)
def pixel_chunk(t, sw, ow):
    """The pixels ``window_products`` takes at a time: all of them while the stacked copy
    ``t`` stays in cache (``RESIDENT_ELEMENTS``), else runs whose windows span
    ``CHUNK_ELEMENTS`` of it (a multiple of 4). Streaming the whole copy once per 4 channels
    ran from memory on large images (64 channels of 224x224: a 39 MB copy read 16 times)."""
    oh, _, kh, c = t.shape
    if t.size <= RESIDENT_ELEMENTS:
        return oh * ow
    return max(4, CHUNK_ELEMENTS // (sw * kh * c) // 4 * 4)


@numba.njit(inline="always", **_PRODUCT_JIT)
def _chunk_products(flat, packed, out, first, last, ow, step, row_len, m, k, zero):
    """``window_products`` over the pixels [first, last) (see there)."""
    for m0 in range(0, m, 4):
        mn = min(4, m - m0)
        w0 = packed[m0]
        w1 = packed[m0 + 1] if mn > 1 else w0
        w2 = packed[m0 + 2] if mn > 2 else w0
        w3 = packed[m0 + 3] if mn > 3 else w0
        for p0 in range(first, last, 4):
            pn = min(4, last - p0)
            r = p0 // ow
            c0 = r * row_len + (p0 - r * ow) * step
            p = p0 + 1 if pn > 1 else p0
            r = p // ow
            c1 = r * row_len + (p - r * ow) * step
            p = p0 + 2 if pn > 2 else p0
            r = p // ow
            c2 = r * row_len + (p - r * ow) * step
            p = p0 + 3 if pn > 3 else p0
            r = p // ow
            c3 = r * row_len + (p - r * ow) * step
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
            for j in range(k):
                u = np.uint64(j)
                v0, v1 = flat[np.uint64(c0) + u], flat[np.uint64(c1) + u]
                v2, v3 = flat[np.uint64(c2) + u], flat[np.uint64(c3) + u]
                a0, a1, a2, a3 = w0[u], w1[u], w2[u], w3[u]
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
            store4(out[m0], p0, pn, s00, s01, s02, s03)
            if mn > 1:
                store4(out[m0 + 1], p0, pn, s10, s11, s12, s13)
            if mn > 2:
                store4(out[m0 + 2], p0, pn, s20, s21, s22, s23)
            if mn > 3:
                store4(out[m0 + 3], p0, pn, s30, s31, s32, s33)


@numba.njit(inline="always", **JIT)
def store4(row, p0, pn, s0, s1, s2, s3):
    """row[p0 : p0 + pn] = the first pn sums of a 4x4 tile's row (a last short block)."""
    row[p0] = s0
    if pn > 1:
        row[p0 + 1] = s1
    if pn > 2:
        row[p0 + 2] = s2
    if pn > 3:
        row[p0 + 3] = s3


@numba.njit(**JIT)
def conv_stacked(x, packed, y, nhwc, t, g, zero):
    """y (N, M, oh * ow) = Conv(x, w) with ``packed`` = w reordered (``reorder_weights``):
    per image, the row-stacked copy, then the window products."""
    sw, ow = g[3], g[9]
    for i in range(x.shape[0]):
        stack_rows(x, i, nhwc, t, g)
        window_products(t, packed, y[i], sw, ow, zero, pixel_chunk(t, sw, ow))


# The shortest window run (C * kh * kw) that takes this loop. Measured at one thread on an
# AVX-512 machine against the compiled im2col + sgemm or dot products (``small_conv``), batch
# 1, stride 1 unless noted, times in us (stacked copy + products):
#   (C, H, M, kernel)       K     before    stacked
#   8, 16x16, 16, 3x3      72        9.6       11.3
#   8, 64x64, 16, 3x3      72      114.9      157.0
#   12, 16x16, 24, 3x3    108       16.4       18.5
#   4, 32x32, 8, 5x5      100       29.1       29.4
#   16, 16x16, 16, 3x3    144       16.8       11.4
#   6, 14x14, 16, 5x5     150        9.3        7.6   (LeNet's second Conv)
#   16, 32x32, 16, 3x3    144       62.5       39.5
#   64, 8x8, 64, 3x3      576       49.3       24.2
#   64, 8x8, 128, s2      576       24.5       15.0
#   128, 4x4, 128, 3x3   1152       44.0       25.8
#   64, 56x56, 64, 3x3    576     2020       1253
#   256, 14x14, 256, 3x3 2304     1952       1040
# Short runs leave the vector loop's remainder a large share of each dot product.
STACK_K = 128
# The largest reordered weight a plan keeps (bytes): the copy is memory beside the weight
# itself, so it is kept for the small and middle layers only (ResNet-50's 3x3 Convs up to
# 128 channels: about 3 MB in all). A larger weight is reordered on every call, into the
# Conv's declared scratch, where the image is large enough to pay for that: from
# ``REORDER_PIXELS`` output pixels a call (reordering costs about 22 / pixels of the
# products: 142 us for 256 x 2304 values against 1040 us of products on 14x14; on 7x7 the
# 512-channel Conv's 621 us would undo the gain).
PACK_BYTES = 1 << 20
REORDER_PIXELS = 128


class StackedPlan:
    """Conv(X, W) of one 2-D float Conv by ``conv_stacked``, fixed per shape: the stacked
    copy's shape, where its scratch comes from and the kept reordered weight.

    Scratch: the stacked copy from ``ctx.workspace["columns"]`` (im2col's columns, never
    smaller), the transposed image from ``"padded"`` where the Conv declares one, else after
    the stacked copy in ``"columns"`` (``applies`` checks that it fits); a weight past
    ``PACK_BYTES``, reordered on every call, from ``"reordered_weights"`` (``workspace``).
    """

    def __init__(self, x_shape, w_shape, g, dtype, workspace: dict[str, int]) -> None:
        n, c, height, width = x_shape
        m, _, kh, kw = w_shape
        self.g = g
        oh, ow, sw = g[8], g[9], g[3]
        self.stacked = (oh, (ow - 1) * sw + kw, kh, c)
        self.image = (height, width, c)
        self.dtype = np.dtype(dtype)
        self.own_padded = "padded" in workspace
        self.weights = (m, c * kh * kw)
        self.keeps = math.prod(self.weights) * self.dtype.itemsize <= PACK_BYTES
        self.packed = None  # (made on the first call: ``held_bytes``, declared to the plan)
        self.source = None  # (the read-only weight ``packed`` holds, reordered)
        self.zero = self.dtype.type(0)
        self._views = None  # (workspace buffers, then the views made into them)

    @staticmethod
    def applies(x_shape, w_shape, g, itemsize: int, workspace: dict[str, int]) -> bool:
        """Whether the loop takes this Conv: kernel columns of dilation 1, a run of at least
        ``STACK_K``, a reordered weight of at most ``PACK_BYTES`` or at least
        ``REORDER_PIXELS`` output pixels, and scratch that fits in what the Conv declares
        (``workspace``: bytes per key)."""
        n, c, height, width = x_shape
        m, _, kh, kw = w_shape
        dw, oh, ow, sw = g[5], g[8], g[9], g[3]
        if dw != 1 or c * kh * kw < STACK_K or (m * c * kh * kw * itemsize > PACK_BYTES
                                                and n * oh * ow < REORDER_PIXELS):
            return False
        stacked = oh * ((ow - 1) * sw + kw) * kh * c * itemsize
        image = height * width * c * itemsize
        if "padded" in workspace:
            return stacked <= workspace.get("columns", 0) and image <= workspace["padded"]
        return stacked + image <= workspace.get("columns", 0)

    @property
    def held_bytes(self) -> int:
        """The reordered weight's bytes where it is kept for the plan's life."""
        return math.prod(self.weights) * self.dtype.itemsize if self.keeps else 0

    @property
    def workspace(self) -> dict[str, int]:
        """Scratch beside the Conv's own: the weight reordered per call where not kept."""
        if self.keeps:
            return {}
        return {"reordered_weights": math.prod(self.weights) * self.dtype.itemsize}

    def _weights(self, ctx, w):
        """W reordered: the kept copy while ``w`` is the same read-only array."""
        if not self.keeps:
            packed = scratch(ctx, "reordered_weights", self.weights, self.dtype)
            reorder_weights(w, packed)
            return packed
        if self.packed is None:
            self.packed = np.empty(self.weights, self.dtype)
        if w is not self.source or w.flags.writeable:
            reorder_weights(w, self.packed)
            self.source = None if w.flags.writeable else w
        return self.packed

    def _scratch(self, ctx):
        workspace = ctx.workspace
        columns, padded = workspace.get("columns"), workspace.get("padded")
        views = self._views
        if views is not None and views[0] is columns and views[1] is padded:
            return views[2], views[3]
        stacked_size, image_size = math.prod(self.stacked), math.prod(self.image)
        if self.own_padded:
            t = scratch(ctx, "columns", self.stacked, self.dtype)
            nhwc = scratch(ctx, "padded", self.image, self.dtype)
        else:
            both = scratch(ctx, "columns", (stacked_size + image_size,), self.dtype)
            t = both[:stacked_size].reshape(self.stacked)
            nhwc = both[stacked_size:].reshape(self.image)
        # Kept only for buffers handed in (a plan's workspace), as DensePlan keeps its views.
        if columns is not None and columns is workspace.get("columns") and (
                not self.own_padded or padded is not None):
            self._views = (columns, padded, t, nhwc)
        return t, nhwc

    def conv(self, ctx, x, w, y) -> None:
        """Writes Conv(X, W) into ``y``; all three C-contiguous."""
        t, nhwc = self._scratch(ctx)
        out = y.reshape(y.shape[0], y.shape[1], -1)
        conv_stacked(x, self._weights(ctx, w), out, nhwc, t, self.g, self.zero)
        if self.own_padded:  # (the transposed image went into "padded": no border is kept,
            # and a padded Conv run next must not trust a stamp left by an earlier one)
            mark_border(ctx.workspace["padded"], None)

    def warm(self) -> None:
        """Compile (or load from numba's disk cache) the loops for this dtype while planning."""
        if self.dtype in _warm_dtypes:
            return
        one = np.zeros((1, 1, 1, 1), self.dtype)
        reorder_weights(one, one.reshape(1, 1))
        reorder_weights(read_only(one), one.reshape(1, 1))  # (a plan's weight: read only)
        conv_stacked(one, one.reshape(1, 1), one.reshape(1, 1, 1), one.reshape(1, 1, 1),
                     one, (1, 1, 1, 1, 1, 1, 0, 0, 1, 1), self.zero)
        _warm_dtypes.add(self.dtype)


_warm_dtypes: set = set()
