"""Compiled Winograd F(4x4, 3x3) for the dense Conv plan (``dense_conv.DensePlan``, layout
"winograd": the FusedConv and the plain Conv) and for dX at stride 1 (``conv_grads``): 3x3
Convs at stride 1 with 4x fewer multiplies in their products. dW of the same Convs reads its
tiles through this module's input transform (``winograd_weight_grad``).

On this tier's CPU the stacked loop's products already run at the FMA units' rate (106-111
GFLOP/s at one thread, the same in and out of cache); onnxruntime's convolutions run there too.
A 3x3 Conv can only get faster with fewer multiplies: Winograd's F(4x4, 3x3) (Lavin and Gray,
arXiv 1509.09308) computes each 4x4 output tile from a 6x6 input tile with 36 products per
channel pair instead of 144. Stages, per pass of one or more images (``PASS_TILES`` tiles
or more, so that small images at a large batch still give sgemm enough columns):

1. X is copied channels last into a zero-bordered (4 th + 2, 4 tw + 2, C) array (``pad_nhwc``),
   so each 6x6 tile's C values at a point are one run;
2. every tile is transformed, V = B^T d B (``input_transform``), into V (36, T, C): each
   point's tiles one matrix;
3. the weights likewise, U = G g G^T into U (M, 36, C) (``weight_transform``), per call:
   keeping U would hold 4x the weight beside the plan;
4. 36 products P[:, p] = U[:, p] V[p]^T (M, T), one batched sgemm on strided views: the
   stage whose work grows with M * C;
5. each tile's 36 values become its 4x4 outputs, A^T P A (``output_transform``), written
   into Y with the last partial tiles cropped.

The transforms are F(4,3) on the points 0, 1, -1, 1/2, -2 and infinity (``xp.kernels.
winograd._F4``: its float32 error on random 64-channel Convs is 2.2e-6 of the output's largest
value, against 5.3e-6 for 0, +-1, +-2). Each runs 16 channels (or tiles) at a time through
small scratch blocks laid out (point, lane), so that every vectorised loop reads and writes
a few runs at constant distances from one base: LLVM vectorises a loop whose runs it cannot
prove apart only behind a runtime check per pair of runs, and gives up past eight pairs (a
loop over the 36 runs of V directly ran scalar, 1.5 ms for 128 channels of 56x56).

float32 only (float64 keeps the stacked loop). ``PORTABLE_WINOGRAD=0`` turns this path off
(as it does the xp kernel's). The scratch is cut from the im2col columns every such Conv
already declares, taking as many output channels a pass as fit there (``chunk``), so the
memory plan does not change.
"""
from __future__ import annotations

import math
import os

import numba
import numpy as np

from backends.numpy.jit.support import JIT, read_only
from backends.xp.kernels.im2col import scratch
from backends.xp.kernels.winograd import ENV

LANES = 16  # (channels or tiles per scratch block: one AVX-512 vector of float32)
F = np.float32
# (the transforms' coefficients as float32 constants: a Python float would make numba
# compute in float64)
H, Q, E, T15, T25, TWO, FOUR, EIGHT = (F(v) for v in (0.5, 0.25, 0.125, 1.5, 2.5, 2, 4, 8))
THIRD, G8, G4, G16, G15 = (F(v) for v in (1 / 3, 8 / 15, 4 / 15, 16 / 15, 1 / 15))
G2 = F(2 / 15)


@numba.njit(inline="always", **JIT)
def _bt(d0, d1, d2, d3, d4, d5):
    """The six rows of B^T times (d0..d5)."""
    return (d0 - T15 * d1 - TWO * d2 + T15 * d3 + d4,
            -d1 + H * d2 + T25 * d3 + d4,
            d1 - T25 * d2 + H * d3 + d4,
            -TWO * d1 - d2 + TWO * d3 + d4,
            H * d1 - d2 - H * d3 + d4,
            d1 - T15 * d2 - TWO * d3 + T15 * d4 + d5)


@numba.njit(inline="always", **JIT)
def _at(x0, x1, x2, x3, x4, x5):
    """The four rows of A^T times (x0..x5)."""
    return (x0 + x1 + x2 + x3 + x4,
            x1 - x2 + H * x3 - TWO * x4,
            x1 + x2 + Q * x3 + FOUR * x4,
            x1 - x2 + E * x3 - EIGHT * x4 + x5)


@numba.njit(inline="always", **JIT)
def _g(k0, k1, k2):
    """The six rows of G times (k0, k1, k2)."""
    return (k0,
            THIRD * (k0 + k1 + k2),
            THIRD * (-k0 + k1 - k2),
            -G16 * k0 - G8 * k1 - G4 * k2,
            G15 * k0 - G2 * k1 + G4 * k2,
            k2)


@numba.njit(**JIT)
def pad_nhwc(x, i, padded, border):
    """padded (Hp, Wp, C) = image ``i`` of x (N, C, H, W) channels last at (border, border),
    zero elsewhere (1: the 3x3 window's one-pixel padding, and past the image up to whole
    tiles; 0 for dY's tiles in ``winograd_weight_grad``)."""
    _, c, h, w = x.shape
    tall, wide, _ = padded.shape
    flat = padded.reshape(-1)
    zero = x.dtype.type(0)
    row = wide * c
    for r in range(tall):
        base = r * row
        if r < border or r >= h + border:
            for j in range(row):
                flat[np.uint64(base + j)] = zero
            continue
        for j in range(border * c):
            flat[np.uint64(base + j)] = zero
        for j in range((w + border) * c, row):
            flat[np.uint64(base + j)] = zero
        for ch in range(c):
            src = x[i, ch, r - border]
            at = base + border * c + ch
            for q in range(w):
                flat[np.uint64(at + q * c)] = src[np.uint64(q)]


@numba.njit(inline="always", **JIT)
def store_block(block, out, base, step, n):
    """out[base + p * step + lane] = block[p * LANES + lane] for the block's points p and
    its first ``n`` lanes: a transformed block into its (point, channel) runs."""
    for p in range(block.size // LANES):
        dst, at = base + p * step, p * LANES
        for lane in range(n):
            out[np.uint64(dst + lane)] = block[np.uint64(at + lane)]


@numba.njit(**JIT)
def input_transform(padded, out, tw, tiles, tile_step, point_step):
    """out[t * tile_step + (a * 6 + b) * point_step + c] = (B^T d B)[a, b] of tile t's 6x6
    window d of channel c, for the ``tiles`` tiles t = (tr, tc) that start at padded row
    4 tr, column 4 tc (``tw`` a row)."""
    _, wide, c = padded.shape
    src = padded.reshape(-1)
    rows = np.empty(36 * LANES, padded.dtype)  # (B^T d: point (a, column j), lane)
    block = np.empty(36 * LANES, padded.dtype)  # (B^T d B: point (a, b), lane)
    for t in range(tiles):
        tr = t // tw
        corner = (tr * 4 * wide + (t - tr * tw) * 4) * c
        for c0 in range(0, c, LANES):
            n = min(LANES, c - c0)
            for j in range(6):  # (along the window's rows, column j: six runs from padded)
                at = corner + j * c + c0
                for lane in range(n):
                    d = _bt(src[np.uint64(at + lane)], src[np.uint64(at + wide * c + lane)],
                            src[np.uint64(at + 2 * wide * c + lane)],
                            src[np.uint64(at + 3 * wide * c + lane)],
                            src[np.uint64(at + 4 * wide * c + lane)],
                            src[np.uint64(at + 5 * wide * c + lane)])
                    for a in range(6):
                        rows[np.uint64((a * 6 + j) * LANES + lane)] = d[a]
            for a in range(6):  # (along the columns)
                at = a * 6 * LANES
                for lane in range(n):
                    e = _bt(rows[np.uint64(at + lane)], rows[np.uint64(at + LANES + lane)],
                            rows[np.uint64(at + 2 * LANES + lane)],
                            rows[np.uint64(at + 3 * LANES + lane)],
                            rows[np.uint64(at + 4 * LANES + lane)],
                            rows[np.uint64(at + 5 * LANES + lane)])
                    for b in range(6):
                        block[np.uint64((a * 6 + b) * LANES + lane)] = e[b]
            store_block(block, out, t * tile_step + c0, point_step, n)


@numba.njit(**JIT)
def weight_transform(w, u):
    """u (M, 36, C)[m, a * 6 + b, c] = (G g G^T)[a, b] for each 3x3 filter g = w[m, c]."""
    m, c = w.shape[:2]
    src, out = w.reshape(-1), u.reshape(-1)
    taps = np.empty(9 * LANES, w.dtype)
    rows = np.empty(18 * LANES, w.dtype)  # (G g: point (a, column j), lane)
    block = np.empty(36 * LANES, w.dtype)
    for o in range(m):
        for c0 in range(0, c, LANES):
            n = min(LANES, c - c0)
            for k in range(9):  # (the filters' taps, channel-major in W: a strided gather)
                at = (o * c + c0) * 9 + k
                for lane in range(n):
                    taps[np.uint64(k * LANES + lane)] = src[np.uint64(at + lane * 9)]
            for j in range(3):
                for lane in range(n):
                    d = _g(taps[np.uint64(j * LANES + lane)],
                           taps[np.uint64((3 + j) * LANES + lane)],
                           taps[np.uint64((6 + j) * LANES + lane)])
                    for a in range(6):
                        rows[np.uint64((a * 3 + j) * LANES + lane)] = d[a]
            for a in range(6):
                at = a * 3 * LANES
                for lane in range(n):
                    e = _g(rows[np.uint64(at + lane)], rows[np.uint64(at + LANES + lane)],
                           rows[np.uint64(at + 2 * LANES + lane)])
                    for b in range(6):
                        block[np.uint64((a * 6 + b) * LANES + lane)] = e[b]
            store_block(block, out, o * 36 * c + c0, c, n)


@numba.njit(**JIT)
def output_transform(prod, y, i, first, tw, per_image):
    """y[i + t // per_image, first : first + m] (m, oh, ow) = the 4x4 output tiles A^T P A of
    tile t, cropped at the edges; prod (m, 36, T) holds the 36 products of the T tiles of
    one or more images, ``per_image`` (th * tw) tiles each."""
    m, _, tiles = prod.shape
    channels, oh, ow = y.shape[1], y.shape[2], y.shape[3]
    src, dst = prod.reshape(-1), y.reshape(-1)
    rows = np.empty(24 * LANES, prod.dtype)  # (A^T P: point (a, column j), lane)
    block = np.empty(16 * LANES, prod.dtype)
    for o in range(m):
        for t0 in range(0, tiles, LANES):
            n = min(LANES, tiles - t0)
            for j in range(6):
                at = (o * 36 + j) * tiles + t0
                for lane in range(n):
                    d = _at(src[np.uint64(at + lane)], src[np.uint64(at + 6 * tiles + lane)],
                            src[np.uint64(at + 12 * tiles + lane)],
                            src[np.uint64(at + 18 * tiles + lane)],
                            src[np.uint64(at + 24 * tiles + lane)],
                            src[np.uint64(at + 30 * tiles + lane)])
                    for a in range(4):
                        rows[np.uint64((a * 6 + j) * LANES + lane)] = d[a]
            for a in range(4):
                at = a * 6 * LANES
                for lane in range(n):
                    e = _at(rows[np.uint64(at + lane)], rows[np.uint64(at + LANES + lane)],
                            rows[np.uint64(at + 2 * LANES + lane)],
                            rows[np.uint64(at + 3 * LANES + lane)],
                            rows[np.uint64(at + 4 * LANES + lane)],
                            rows[np.uint64(at + 5 * LANES + lane)])
                    for b in range(4):
                        block[np.uint64((a * 4 + b) * LANES + lane)] = e[b]
            image = t0 // per_image
            local = t0 - image * per_image
            tr = local // tw
            tc = local - tr * tw
            for lane in range(n):  # (each tile's 4x4 outputs into Y, cropped)
                r0, q0 = tr * 4, tc * 4
                base = ((i + image) * channels + first + o) * oh * ow
                for a in range(min(4, oh - r0)):
                    at = base + (r0 + a) * ow + q0
                    for b in range(min(4, ow - q0)):
                        dst[np.uint64(at + b)] = block[np.uint64((a * 4 + b) * LANES + lane)]
                tc += 1
                if tc == tw:
                    tr, tc = tr + 1, 0
                    if tr * tw == per_image:
                        image, tr = image + 1, 0


@numba.njit(**JIT)
def transform_image(x, i, padded, out, tw, tiles, tile_step, point_step):
    """The tiles of image ``i`` (``pad_nhwc``, then ``input_transform``): one call."""
    pad_nhwc(x, i, padded, 1)
    input_transform(padded, out, tw, tiles, tile_step, point_step)


def conv_winograd(x, w, y, padded, v, u, prod, tw) -> None:
    """y (N, M, oh, ow) = the 3x3 stride-1 correlation of x (N, C, H, W), padded by one on
    each side, with w (M, C, 3, 3): F(4x4, 3x3) on ``v.shape[0] // per_image`` images at a
    time (their tiles side by side in V), ``u.shape[0]`` output channels at a time (all of
    them when the scratch holds them: the weights are then transformed once for all the
    images); ``prod`` is flat, the products of one such pass. The 36 products of a pass are
    one batched sgemm on views of U, V and P: OpenBLAS's packed panels, where dot products
    along C would end in a horizontal sum each."""
    n, m, chunk = x.shape[0], w.shape[0], u.shape[0]
    _, passing, c = v.shape
    per_image = (padded.shape[0] - 2) // 4 * tw
    group = passing // per_image
    flat = v.reshape(-1)
    if chunk >= m:
        weight_transform(w, u)
    for i in range(0, n, group):
        images = min(group, n - i)
        tiles = images * per_image
        for k in range(images):
            transform_image(x, i + k, padded, flat[k * per_image * c:], tw, per_image, c,
                            passing * c)
        v_part = v[:, :tiles]
        for first in range(0, m, chunk):
            count = min(chunk, m - first)
            u_part = u[:count]
            p_part = prod[:count * 36 * tiles].reshape(count, 36, tiles)
            if chunk < m:
                weight_transform(w[first:first + count], u_part)
            np.matmul(u_part.transpose(1, 0, 2), v_part.transpose(0, 2, 1),
                      out=p_part.transpose(1, 0, 2))
            output_transform(p_part, y, i, first, tw, per_image)


# The fewest tiles (of 4x4 outputs) in the batch this path takes, and the fewest input
# channels: per tile the transforms cost O(36 C + 16 M) against the products' 36 C M, and
# the weight transform is paid per call. Measured at one thread on an AVX-512 machine (2
# shared cores), batch 1, ms, against the stacked loop (``stacked_conv``), float32:
#   (C, H, M)          winograd   stacked
#   128, 56, 32          2.86      2.96    (DenseNet-121's growth Convs: sgemm's 32 rows)
#   128, 28, 32          0.50      0.69
#   128, 14, 32          0.21      0.18    (16 tiles: the weight transform is a third)
#   64, 56, 64           1.87      3.14    (ResNet-50)
#   64, 56, 192          7.06      8.77    (Inception v2)
#   128, 28, 128         2.27      2.75
#   96, 28, 128          1.02      1.83    (GoogLeNet)
#   512, 28, 512        23.4      39.0     (VGG-19)
#   256, 14, 256         3.66      2.53
#   37, 13, 5            0.025     0.018
# and by the tiles in the batch (the weight transform is paid once for all its images):
#   128, 24, 128         1.53      1.99    (36 tiles)
#   256, 22, 256         4.77      5.87    (36 tiles)
#   256, 14, 256         4.95      4.91    (batch 2: 32 tiles)
#   512, 4, 512         16.8-18.4 26.0     (batch 32: 32 tiles)
MIN_TILES = 32
MIN_CHANNELS = 32
CHUNK = 16  # (output channels: the chunk is a multiple of this, or all of them)
# Tiles a pass takes (images side by side in V): the products' sgemm is weak on few columns.
# At batch 32, one thread, ms (ResNet-18's stages on CIFAR; the stacked loop 24-40 beside
# each): 512 channels of 4x4 (one tile an image) 102 a image at a time, 36 eight at a time,
# 26 all 32; 256 channels of 8x8 (four tiles) 17.9, 15.8 four at a time, 16.3 all 32.
PASS_TILES = 64


def enabled() -> bool:
    """Whether ``PORTABLE_WINOGRAD`` leaves this path on (unset, ``auto`` or 4)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "2")


def _fixed(x_shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(padded, V) shapes: one image padded, the tiles of a pass's images (``PASS_TILES`` or
    more tiles, or the whole batch) in V."""
    n, c, h, w = x_shape
    th, tw = -(-h // 4), -(-w // 4)
    images = min(n, -(-PASS_TILES // (th * tw)))
    return (4 * th + 2, 4 * tw + 2, c), (36, images * th * tw, c)


def chunk(x_shape, w_shape, columns: int) -> int:
    """Output channels a pass takes so that the scratch (padded, V, then U and P for the
    chunk) fits in ``columns`` bytes (the im2col columns the Conv declares): all of them, or
    the most in multiples of ``CHUNK``; 0 when not even ``CHUNK`` fit."""
    m, c = w_shape[0], x_shape[1]
    padded, v = _fixed(x_shape)
    free = columns // 4 - math.prod(padded) - math.prod(v)
    per_channel = 36 * (c + v[1])
    if free >= m * per_channel:
        return m
    return max(0, free // per_channel // CHUNK * CHUNK)


def scratch_bytes(x_shape, w_shape) -> int:
    """The scratch of one pass over all the output channels (``chunk`` takes them all)."""
    padded, v = _fixed(x_shape)
    return 4 * (math.prod(padded) + math.prod(v) + 36 * w_shape[0] * (x_shape[1] + v[1]))


def applies(x_shape, w_shape, geom_tuple, dtype, workspace: dict[str, int]) -> bool:
    """Whether this path takes a Conv: float32, a 3x3 kernel at stride 1 and dilation 1 with
    one pixel of padding on every side (the output as large as the input), at least
    ``MIN_CHANNELS`` input channels and ``MIN_TILES`` tiles in the batch, and scratch for
    ``CHUNK`` output channels or more in the im2col columns it declares (``workspace``:
    bytes per key), so that the memory plan is unchanged."""
    kh, kw, sh, sw, dh, dw, ph, pw, oh, ow = geom_tuple
    n, c, h, w = x_shape
    if (np.dtype(dtype) != np.float32 or (oh, ow) != (h, w) or c < MIN_CHANNELS
            or (kh, kw, sh, sw, dh, dw, ph, pw) != (3, 3, 1, 1, 1, 1, 1, 1) or not enabled()):
        return False
    if n * -(-h // 4) * -(-w // 4) < MIN_TILES:
        return False
    return chunk(x_shape, w_shape, workspace.get("columns", 0)) >= min(CHUNK, w_shape[0])


def cut_scratch(ctx, key: str, shapes) -> list[np.ndarray]:
    """float32 arrays of ``shapes`` one after another in the scratch under ``key``."""
    flat = scratch(ctx, key, (sum(math.prod(s) for s in shapes),), np.float32)
    cut, at = [], 0
    for shape in shapes:
        cut.append(flat[at:at + math.prod(shape)].reshape(shape))
        at += math.prod(shape)
    return cut


def takes(x_shape, w_shape, geom_tuple, dtype) -> bool:
    """``applies``, for a Conv whose scratch comes from the context on demand (dX, dW in
    ``conv_grads``) rather than from the columns the plan declares."""
    need = {"columns": scratch_bytes(x_shape, w_shape)}
    return applies(x_shape, w_shape, geom_tuple, dtype, need)


class WinogradPlan:
    """Conv(X, W) of one Conv by ``conv_winograd``: its scratch, cut from the workspace's
    im2col columns (``chunk`` output channels a pass)."""

    def __init__(self, x_shape, w_shape, workspace: dict[str, int]) -> None:
        padded, v = _fixed(x_shape)
        count = chunk(x_shape, w_shape, workspace.get("columns", 0))
        self.shapes = (padded, v, (count, 36, x_shape[1]), (count * 36 * v[1],))
        self.tw = padded[1] // 4
        self._views = None  # (the columns buffer, then the views cut from it)

    def _scratch(self, ctx):
        columns = ctx.workspace.get("columns")
        views = self._views
        if views is not None and views[0] is columns:
            return views[1]
        cut = cut_scratch(ctx, "columns", self.shapes)
        if columns is not None and columns is ctx.workspace.get("columns"):
            self._views = (columns, cut)  # (a plan's workspace: kept, as DensePlan keeps its)
        return cut

    def conv(self, ctx, x, w, y) -> None:
        """Writes Conv(X, W) without bias into ``y``; all three C-contiguous."""
        padded, v, u, prod = self._scratch(ctx)
        conv_winograd(x, w, y, padded, v, u, prod, self.tw)

    @staticmethod
    def warm() -> None:
        """Compile (or load from numba's disk cache) the loops while planning."""
        x = np.zeros((1, 1, 4, 4), np.float32)
        padded, v = (np.zeros(s, np.float32) for s in _fixed(x.shape))
        u, prod = np.zeros((1, 36, 1), np.float32), np.zeros(36 * v.shape[1], np.float32)
        w = np.zeros((1, 1, 3, 3), np.float32)
        for weights in (w, read_only(w)):  # (a plan's weight is read only)
            conv_winograd(x, weights, np.zeros((1, 1, 4, 4), np.float32), padded, v, u, prod,
                          1)

