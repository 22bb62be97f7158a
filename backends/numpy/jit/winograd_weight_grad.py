"""Compiled Winograd F(3x3, 4x4) for dW of a 3x3 stride-1 Conv (``conv_grads``: the
ConvGradWeight of a Conv that ``winograd_conv`` runs forward): 4x fewer multiplies than the
dot products of shifted runs.

dW[m, c] = sum over output positions (y, x) of dY[m, y, x] * X[c, y + a - 1, x + b - 1]: per
4x4 tile of dY, the 3x3 correlation of a 6x6 window of the padded X with a 4x4 "filter" of
dY. F(4,3) reads y = A^T [(G g) . (B^T d)]; the same identity, read for the filter, gives
F(3,4): g's gradient is G^T [(A dy) . (B^T d)], and in 2-D dW = G^T Z G with Z the sum over
tiles of (A dy A^T) . (B^T d B). So, per image:

1. X's tiles are transformed as in the forward Conv (``winograd_conv.transform_image``) into
   V (36, T, C);
2. dY is copied channels last, zero past the edges (``pad_nhwc`` with no border), and each 4x4
   tile becomes its 36 points A dy A^T (``dy_transform``) in Y (36, T, M);
3. Z[:, p] (M, C) = Y[p]^T V[p], summed over the tiles of the images a pass takes (about
   ``DW_PASS_TILES``): one batched sgemm a pass;
4. dW = G^T Z G (``weight_grad_transform``): 36 points to the 3x3 taps.

The zeros past dY's edge make the partial tiles exact: the identity holds for any values, and
the terms past the edge vanish. float32 only, as the forward path; ``PORTABLE_WINOGRAD=0``
turns it off.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.support import JIT
from backends.numpy.jit.winograd_conv import (E, EIGHT, FOUR, G2, G4, G8, G15, G16, H, LANES,
                                              Q, THIRD, TWO, cut_scratch, pad_nhwc,
                                              store_block, transform_image)


@numba.njit(inline="always", **JIT)
def _a(y0, y1, y2, y3):
    """The six rows of A (A^T's transpose, ``winograd_conv._at``) times (y0..y3)."""
    return (y0,
            y0 + y1 + y2 + y3,
            y0 - y1 + y2 - y3,
            y0 + H * y1 + Q * y2 + E * y3,
            y0 - TWO * y1 + FOUR * y2 - EIGHT * y3,
            y3)


@numba.njit(inline="always", **JIT)
def _gt(z0, z1, z2, z3, z4, z5):
    """The three rows of G^T (``winograd_conv._g``'s transpose) times (z0..z5)."""
    return (z0 + THIRD * (z1 - z2) - G16 * z3 + G15 * z4,
            THIRD * (z1 + z2) - G8 * z3 - G2 * z4,
            THIRD * (z1 - z2) - G4 * z3 + G4 * z4 + z5)


@numba.njit(**JIT)
def dy_transform(tiles, out, tw, count, point_step):
    """out[(a * 6 + b) * point_step + t * M + m] = (A g A^T)[a, b] of tile t's 4x4 window g
    of channel m in ``tiles`` (4 th, 4 tw, M), dY channels last, for the ``count`` tiles
    t = (tr, tc) at row 4 tr, column 4 tc (``tw`` a row)."""
    _, wide, m = tiles.shape
    src = tiles.reshape(-1)
    rows = np.empty(24 * LANES, tiles.dtype)  # (A g: point (a, column j), lane)
    block = np.empty(36 * LANES, tiles.dtype)
    line = wide * m
    for t in range(count):
        tr = t // tw
        corner = (tr * 4 * wide + (t - tr * tw) * 4) * m
        for c0 in range(0, m, LANES):
            n = min(LANES, m - c0)
            for j in range(4):
                at = corner + j * m + c0
                for lane in range(n):
                    d = _a(src[np.uint64(at + lane)], src[np.uint64(at + line + lane)],
                           src[np.uint64(at + 2 * line + lane)],
                           src[np.uint64(at + 3 * line + lane)])
                    for a in range(6):
                        rows[np.uint64((a * 4 + j) * LANES + lane)] = d[a]
            for a in range(6):
                at = a * 4 * LANES
                for lane in range(n):
                    e = _a(rows[np.uint64(at + lane)], rows[np.uint64(at + LANES + lane)],
                           rows[np.uint64(at + 2 * LANES + lane)],
                           rows[np.uint64(at + 3 * LANES + lane)])
                    for b in range(6):
                        block[np.uint64((a * 6 + b) * LANES + lane)] = e[b]
            store_block(block, out, t * m + c0, point_step, n)


@numba.njit(**JIT)
def transform_dy_image(dy, i, tiles, out, tw, count, point_step):
    """The tiles of image ``i`` of dY (``pad_nhwc`` with no border, then ``dy_transform``)."""
    pad_nhwc(dy, i, tiles, 0)
    dy_transform(tiles, out, tw, count, point_step)


@numba.njit(**JIT)
def weight_grad_transform(z, dw):
    """dw (M, C, 3, 3)[m, c] = G^T Z G of the 36 points z (M, 36, C)[m, :, c]."""
    m, _, c = z.shape
    src, out = z.reshape(-1), dw.reshape(-1)
    rows = np.empty(18 * LANES, z.dtype)  # (G^T Z: point (j, column b), lane)
    block = np.empty(9 * LANES, z.dtype)
    for o in range(m):
        for c0 in range(0, c, LANES):
            n = min(LANES, c - c0)
            for b in range(6):
                at = (o * 36 + b) * c + c0
                for lane in range(n):
                    d = _gt(src[np.uint64(at + lane)], src[np.uint64(at + 6 * c + lane)],
                            src[np.uint64(at + 12 * c + lane)],
                            src[np.uint64(at + 18 * c + lane)],
                            src[np.uint64(at + 24 * c + lane)],
                            src[np.uint64(at + 30 * c + lane)])
                    for j in range(3):
                        rows[np.uint64((j * 6 + b) * LANES + lane)] = d[j]
            for j in range(3):
                at = j * 6 * LANES
                for lane in range(n):
                    e = _gt(rows[np.uint64(at + lane)], rows[np.uint64(at + LANES + lane)],
                            rows[np.uint64(at + 2 * LANES + lane)],
                            rows[np.uint64(at + 3 * LANES + lane)],
                            rows[np.uint64(at + 4 * LANES + lane)],
                            rows[np.uint64(at + 5 * LANES + lane)])
                    for k in range(3):
                        block[np.uint64((j * 3 + k) * LANES + lane)] = e[k]
            for k in range(9):  # (into the filters' taps: a strided scatter)
                at = (o * c + c0) * 9 + k
                for lane in range(n):
                    out[np.uint64(at + lane * 9)] = block[np.uint64(k * LANES + lane)]


def grad_weight_winograd(x, dy, dw, padded, tiles, v, y, z, part, tw) -> None:
    """dw (M, C, 3, 3) = the weight gradient of the 3x3 stride-1 Conv of x (N, C, H, W),
    padded by one, whose output gradient is dy (N, M, H, W): the tiles of
    ``v.shape[1] // per_image`` images a pass in v (36, tiles, C) and y (36, tiles, M), their
    36 products summed into z (M, 36, C) (``part``, of z's shape, holds a later pass's)."""
    n, c, m = x.shape[0], x.shape[1], dy.shape[1]
    passing = v.shape[1]
    per_image = (padded.shape[0] - 2) // 4 * tw
    group = passing // per_image
    v_flat, y_flat = v.reshape(-1), y.reshape(-1)
    for i in range(0, n, group):
        images = min(group, n - i)
        for k in range(images):
            first = k * per_image
            transform_image(x, i + k, padded, v_flat[first * c:], tw, per_image, c,
                            passing * c)
            transform_dy_image(dy, i + k, tiles, y_flat[first * m:], tw, per_image,
                               passing * m)
        count = images * per_image
        out = z if i == 0 else part
        np.matmul(y[:, :count].transpose(0, 2, 1), v[:, :count], out=out.transpose(1, 0, 2))
        if i:
            z += part
    weight_grad_transform(z, dw)


# Tiles a pass sums (images side by side in V and Y): the products' sgemm sums over them.
# At batch 32, one thread, ms for the whole dW (products alone), passes of 64 / 128 / 256
# tiles: 64 -> 64 channels of 32x32 21.2 (6.2) / 19.6 (6.1) / 21.9 (7.7), 512 tiles 26.2
# (11.6); 128 -> 128 of 16x16 13.9 / 13.1 / 14.7. V and Y of a pass then stay in cache.
DW_PASS_TILES = 128


def shapes(x_shape, m: int) -> tuple[tuple[int, ...], ...]:
    """(padded X, dY's tiles, V, Y, Z, part) for one pass of ``grad_weight_winograd``."""
    n, c, h, w = x_shape
    th, tw = -(-h // 4), -(-w // 4)
    tiles = min(n, -(-DW_PASS_TILES // (th * tw))) * th * tw
    return ((4 * th + 2, 4 * tw + 2, c), (4 * th, 4 * tw, m), (36, tiles, c), (36, tiles, m),
            (m, 36, c), (m, 36, c))


class WeightGradPlan:
    """dW of one ConvGradWeight by ``grad_weight_winograd``: its scratch (from the context,
    on demand, as the other dW loops take theirs)."""

    def __init__(self, x_shape, m: int) -> None:
        self.shapes = shapes(x_shape, m)
        self.tw = self.shapes[0][1] // 4

    def run(self, ctx, x, dy, dw) -> None:
        padded, tiles, v, y, z, part = cut_scratch(ctx, "columns", self.shapes)
        grad_weight_winograd(x, dy, dw, padded, tiles, v, y, z, part, self.tw)
