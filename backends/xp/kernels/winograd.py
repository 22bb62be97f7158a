"""Winograd convolution F(m x m, 3 x 3) for 2-D Conv with a 3x3 kernel, stride 1, dilation 1
and one group, written against ``xp`` (NumPy or CuPy).

Stages (Lavin and Gray, arXiv 1509.09308), with alpha = m + 2 points per axis:
1. pad the input once, channels last (scratch), so that ceil(out / m) tiles of m outputs fit
   along each axis;
2. gather the overlapping alpha x alpha input tiles through one strided view into a
   (alpha^2, tiles * C) array, and transform them all with one GEMM by kron(B^T, B^T): one
   GEMM with a 36-deep contraction runs faster in BLAS than two 6-deep ones plus a transpose;
3. transform the weights the same way, U = kron(G, G) vec(g): (alpha^2, M, C);
4. one batched GEMM over the alpha^2 points, (alpha^2, M, C) @ (alpha^2, C, tiles): the only
   step whose cost grows with M * C, and it does m^2 * 9 / alpha^2 fewer multiplies than the
   im2col GEMM (2.25x for F(2,3), 4x for F(4,3));
5. inverse-transform with one GEMM by kron(A^T, A^T) and write the m x m output tiles into Y
   through strided views of Y, the last partial tiles cropped.

F(2,3) is Lavin and Gray's, on the points 0, 1, -1 and infinity; F(4,3) uses 0, 1, -1, 1/2,
-2 and infinity (see ``_F4`` for why). The transforms are exact in float64 up to rounding; in
float32 the error grows with the transforms' conditioning, hence the tests' bounds.

The weight transform U depends only on W, and for a deep layer at batch 1 it costs as much as
the whole im2col GEMM, so U is cached (``WeightCache``) under the weight buffer's address,
shape, strides and dtype. An address alone is not safe: training updates weights in place, and a
freed buffer's address is reused. So every hit is checked by comparing W's bits with a copy
kept beside U: it reads 2 |W| bytes, where the transform does 36 multiply-adds per weight
and writes 4 |W| bytes (F(4,3); 16 and 1.8 |W| for F(2,3)). The check is exact, so a stale
entry can only cost a recompute. The cache holds at most ``PORTABLE_WINOGRAD_CACHE_MB``
(default 256, 0: off) and drops the least recently used entries beyond that; it lives beside
the plan, not in its arena, so the memory plan does not count it (NumPy only).

``tile_size`` is the selection rule: whether a node may take this path and which tile
size it takes (environment switch ``PORTABLE_WINOGRAD``: unset or 0 off, ``auto`` the measured
rule, 2 or 4 forced). It is off unless asked for: the transformed weights and their check copy
hold about 5x the eligible weights' bytes outside the memory plan, which would break the
prediction-memory figures low-memory inference relies on; a user with memory to spare turns it
on for speed (``auto``: 1.3-2.4x on the large 3x3 layers of benchmarks/winograd.py). The
compiled CPU tier has its own F(4,3) for float32 (``backends/numpy/jit/winograd_conv.py``),
on unless the switch is 0 or 2: it transforms the weights per call into the plan's scratch.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

from portable.errors import BackendError
from portable.ops.conv import Geometry

from backends.xp.kernels.im2col import scratch

# (B^T, G, A^T) per output tile size m.
_F2 = (
    [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
    [[1, 1, 1, 0], [0, 1, -1, -1]],
)
# F(4,3) on the points 0, 1, -1, 1/2, -2 and infinity rather than Lavin and Gray's 0, +-1, +-2:
# with one point halved the transforms' entries span less (1/15 to 8 instead of 1/24 to 8,
# B^T's up to 5/2 instead of 5), and the float32 error on random 64-channel convolutions
# (benchmarks/winograd.py's shapes) fell from 5.3e-6 to 2.2e-6 of the output's largest value
# (medians; Barabasz et al., arXiv 1803.10986, found this set best too). The matrices follow
# the Toom-Cook construction: A^T's columns are powers of the points, G's rows powers divided
# by prod(p_j - p_l), and B^T makes A^T ((G g) * (B^T d)) the correlation of d with g.
_F4 = (
    [[1, -3 / 2, -2, 3 / 2, 1, 0], [0, -1, 1 / 2, 5 / 2, 1, 0], [0, 1, -5 / 2, 1 / 2, 1, 0],
     [0, -2, -1, 2, 1, 0], [0, 1 / 2, -1, -1 / 2, 1, 0], [0, 1, -3 / 2, -2, 3 / 2, 1]],
    [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3], [-1 / 3, 1 / 3, -1 / 3],
     [-16 / 15, -8 / 15, -4 / 15], [1 / 15, -2 / 15, 4 / 15], [0, 0, 1]],
    [[1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -2, 0], [0, 1, 1, 1 / 4, 4, 0],
     [0, 1, -1, 1 / 8, -8, 1]],
)
TILES = {2: _F2, 4: _F4}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
ENV = "PORTABLE_WINOGRAD"


def transforms(m: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kron(B^T, B^T), kron(G, G), kron(A^T, A^T)) of F(m x m, 3 x 3), as NumPy arrays of
    ``dtype``: they act on tiles flattened row-major (vec(X^T d X) = kron(X^T, X^T) vec(d))."""
    bt, g, at = (np.asarray(a, np.float64) for a in TILES[m])
    return tuple(np.kron(a, a).astype(dtype) for a in (bt, g, at))


def eligible(x, w, geom: Geometry, group: int) -> bool:
    """Whether Winograd computes this Conv: 2-D, kernel 3x3, stride 1, dilation 1, one group,
    float32 or float64 (float16 keeps im2col: the transforms would lose too many bits)."""
    return (len(x.shape) == 4 and tuple(geom.kernel) == (3, 3) and tuple(geom.strides) == (1, 1)
            and tuple(geom.dilations) == (1, 1) and group == 1
            and np.dtype(x.dtype) in _DTYPES and np.dtype(w.dtype) == np.dtype(x.dtype))


def _mode() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "0", "auto", "2", "4"):
        raise BackendError(f"{ENV}={value!r}: use 0 or unset (off), auto (where it pays), "
                           f"2 (F(2,3)) or 4 (F(4,3))")
    return value


def automatic_tile(batch: int, channels: int, filters: int, out) -> int:
    """The tile size that beats im2col + GEMM on a CPU at one BLAS thread, 0 where none does,
    from benchmarks/winograd.py (weights transformed once and cached, as in inference). The
    GEMM it saves costs O(C * M) per tile; the input side (pad, gather, transform) O(36 C) and
    the output side O(16 M) per tile, so layers with few input channels stay on im2col
    (C = 32 and 48 lost even at batch 8, M = 32 with C = 128 won); the batched GEMM needs at
    least 32 tiles in all (batch times tiles per image) to pay for the transforms. Where
    Winograd won, F(4,3) won over F(2,3) or tied with it, so the rule never picks F(2,3) (the
    switch still can)."""
    tiles = batch * (-(-out[0] // 4)) * (-(-out[1] // 4))
    return 4 if channels >= 64 and filters >= 32 and tiles >= 32 else 0


def tile_size(ctx, x, w, geom: Geometry, group: int) -> int:
    """0 (use im2col), 2 or 4: the environment's choice for an eligible Conv, else the
    automatic rule (CPU only: measured there). ``ctx`` is anything with the array namespace
    as ``xp`` (a kernel context, a backend); ``x`` and ``w`` arrays or TensorTypes."""
    if not eligible(x, w, geom, group):
        return 0
    return _chosen_tile(ctx, x.shape[0], x.shape[1], w.shape[0], geom)


def _chosen_tile(ctx, batch: int, channels: int, filters: int, geom: Geometry) -> int:
    """The switch's tile for an eligible convolution, or the automatic rule's under ``auto``."""
    mode = _mode()
    if mode in ("", "0"):
        return 0
    if mode != "auto":
        return int(mode)
    if ctx.xp is not np:
        return 0
    return automatic_tile(batch, channels, filters, tuple(geom.out))


def _padded(ctx, x, head, size):
    """``x`` moved to (N, H, W, C) inside zeros: padded[b, i, j, c] = x[b, c, i - head[0],
    j - head[1]] over (N, *size, C); a negative head crops, and what lies past the input
    reads 0. Channels last make every tile element's C values one contiguous run for the
    gather. Only the border is zeroed, not the whole array."""
    n, c = x.shape[:2]
    padded = scratch(ctx, "winograd_a", (n,) + tuple(size) + (c,), x.dtype)
    src, dst = [slice(None), slice(None)], [slice(None)]
    for axis, (h, extent, total) in enumerate(zip(head, x.shape[2:], size)):
        lo, hi = max(0, -h), max(max(0, -h), min(extent, total - h))
        src.append(slice(lo, hi))
        dst.append(slice(lo + h, hi + h))
        for zero in (slice(0, lo + h), slice(hi + h, total)):
            index = [slice(None)] * 4
            index[1 + axis] = zero
            padded[tuple(index)] = 0
    padded[tuple(dst)] = x[tuple(src)].transpose(0, 2, 3, 1)
    return padded


def _write_tiles(xp, tiles, y, m: int) -> None:
    """Copy (N, M, th, m, tw, m) output tiles into y (N, M, H, W), cropping the last partial
    tile of each axis: up to four strided copies (full/partial rows x full/partial columns)."""
    sn, sm, sh, sw = y.strides
    per_axis = []
    for size in y.shape[2:]:
        full, rest = divmod(size, m)
        per_axis.append([(0, full, m)] * bool(full) + [(full, full + 1, rest)] * bool(rest))
    for t0, t1, a in per_axis[0]:
        for u0, u1, b in per_axis[1]:
            view = xp.lib.stride_tricks.as_strided(
                y[:, :, t0 * m:, u0 * m:], shape=y.shape[:2] + (t1 - t0, a, u1 - u0, b),
                strides=(sn, sm, m * sh, sh, m * sw, sw))
            view[...] = tiles[:, :, t0:t1, :a, u0:u1, :b]


def weight_transform(xp, w, m: int, transposed: bool = False):
    """U (alpha^2, M, C) = G g G^T for every filter of W (M, C, 3, 3). ``transposed``: W is a
    ConvTranspose weight (C, M, 3, 3) whose adjoint Conv uses the flipped kernels of W^T; the
    flip reverses kron(G, G)'s columns and the transpose is a view of U."""
    kg = xp.asarray(transforms(m, w.dtype)[1])
    if transposed:
        kg = kg[:, ::-1]
    u = xp.matmul(kg, w.reshape(-1, 9).T).reshape((kg.shape[0],) + w.shape[:2])
    return u.transpose(0, 2, 1) if transposed else u


class WeightCache:
    """Transformed weights by weight buffer, each checked against a copy of W's bits before it
    is used (see the module docstring); least recently used entries go first."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = 0
        self.lock = threading.Lock()

    @staticmethod
    def limit() -> int:
        return int(float(os.environ.get("PORTABLE_WINOGRAD_CACHE_MB", "256")) * (1 << 20))

    @staticmethod
    def _bits(a):
        return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])

    def transformed(self, xp, w, m: int, transposed: bool = False):
        limit = self.limit()
        if xp is not np or not limit:
            return weight_transform(xp, w, m, transposed)
        key = (w.__array_interface__["data"][0], w.shape, w.strides, w.dtype.str, m, transposed)
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
        if entry is not None and np.array_equal(self._bits(entry[0]), self._bits(w)):
            self.hits += 1
            return entry[1]
        self.misses += 1
        u = weight_transform(xp, w, m, transposed)
        size = w.nbytes + u.nbytes
        if size <= limit:
            with self.lock:
                old = self.entries.pop(key, None)
                self.nbytes += size - (0 if old is None else old[0].nbytes + old[1].nbytes)
                self.entries[key] = (w.copy(), u)
                while self.nbytes > limit:
                    _, (kept, dropped) = self.entries.popitem(last=False)
                    self.nbytes -= kept.nbytes + dropped.nbytes
        return u


weights = WeightCache()


def winograd(ctx, x, u, head, y, m: int) -> None:
    """Y (N, M, H, W) = the 3x3 correlation of X (zero outside, offset by ``head``) with the
    filters whose transforms are ``u`` (alpha^2, M, C)."""
    xp = ctx.xp
    n, c = x.shape[:2]
    filters = u.shape[1]
    alpha = m + 2
    kb, _, ka = (xp.asarray(t) for t in transforms(m, x.dtype))
    th, tw = (-(-size // m) for size in y.shape[2:])
    padded = _padded(ctx, x, head, (th * m + 2, tw * m + 2))
    tiles = th * tw * n
    # (alpha, alpha, N, th, tw, C): tile (i, j) of image b starts at padded row i*m, col j*m.
    sn, sh, sw, sc = padded.strides
    view = xp.lib.stride_tricks.as_strided(
        padded, shape=(alpha, alpha, n, th, tw, c), strides=(sh, sw, sn, m * sh, m * sw, sc))
    gathered = scratch(ctx, "winograd_b", (alpha * alpha, tiles * c), x.dtype)
    gathered.reshape(view.shape)[...] = view
    v = scratch(ctx, "winograd_a", (alpha * alpha, tiles, c), x.dtype)
    xp.matmul(kb, gathered, out=v.reshape(alpha * alpha, tiles * c))
    products = scratch(ctx, "winograd_b", (alpha * alpha, filters, tiles), x.dtype)
    xp.matmul(u, v.transpose(0, 2, 1), out=products)
    out = scratch(ctx, "winograd_a", (m * m, filters * tiles), x.dtype)
    xp.matmul(ka, products.reshape(alpha * alpha, -1), out=out)
    # (m, m, M, N, th, tw) -> (N, M, th, m, tw, m)
    _write_tiles(xp, out.reshape(m, m, filters, n, th, tw).transpose(3, 2, 4, 0, 5, 1), y, m)


def conv2d(ctx, x, w, geom: Geometry, m: int, y) -> None:
    """Conv (3x3, stride 1, dilation 1, one group) of X with W (M, C, 3, 3), no bias, into y."""
    winograd(ctx, x, weights.transformed(ctx.xp, w, m), geom.head, y, m)


def transpose_tile(ctx, x, w, geom: Geometry, group: int) -> int:
    """The tile size for a ConvTranspose whose adjoint Conv (``geom``) is eligible: at stride 1
    it is itself a Conv of X with the flipped W^T, so the same rule applies with the roles of
    C and M swapped; 0 where it is not eligible."""
    if len(x.shape) != 4 or not eligible(x, w, geom, group):
        return 0
    return _chosen_tile(ctx, x.shape[0], x.shape[1], w.shape[1], geom)


def conv_transpose2d(ctx, x, w, geom: Geometry, m: int, y) -> None:
    """ConvTranspose (stride 1, 3x3, one group) of X with W (C, M, 3, 3), no bias, into y: the
    correlation of X with flipped W^T, whose windows start 2 - head before the input (the
    Conv geometry's head; a head over 2 crops)."""
    head = tuple(2 - h for h in geom.head)
    winograd(ctx, x, weights.transformed(ctx.xp, w, m, transposed=True), head, y, m)
