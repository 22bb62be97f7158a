"""Compiled 1x1 Conv on planes of a few positions (a MobileNet's 2x2 tail), from W transposed.

A 1x1 Conv at stride 1 is Y[m, p] = sum_c W[m, c] X[c, p]: sgemm on X as it lies, which the
compiled FusedConv runs for every plane size (``fused_conv._pointwise``). With P = 4
positions (a 2x2 plane) sgemm packs all of W on every call for a product four columns wide,
and the dot products of ``recurrent_math.matmul_nt`` run along C, which is short (40-80)
for a vector loop. Here W is read transposed, W^T (C, M), and Y is built four positions at
a time as outer products: for each input channel c, four accumulator rows of M take
X[c, p] times row c of W^T, runs of M elements that LLVM vectorises; bias, the residual Z
and the bounds follow in the same call (``pointwise_transposed``).

W^T is made once by the plan (``TransposedWeights``) and reused while the plan hands the
same read-only array (a graph's initializers are frozen read-only); a writeable weight (a
trained parameter, a caller's array) could change between calls, so those calls keep
sgemm.

Measured on 2 shared cores, one thread, float32, per FusedConv with Clip (sgemm + the
compiled bias pass / this loop), in us:
    (C -> M, P)          sgemm    transposed
    80 -> 1280, 4        21.7       10.8
    40 -> 240, 4          3.3        2.0
    144 -> 40, 4          2.4        1.9
    240 -> 40, 4          3.2        2.7
    240 -> 80, 4          5.1        5.8
    24 -> 144, 16         2.6        4.6
    16 -> 96, 16          1.9        2.9
The loop is taken up to ``POSITIONS`` positions an image and from ``CHANNELS`` output
channels, where it won by a margin; past 4 positions the accumulator rows are reloaded per
group of four, and sgemm's packing is paid back. Inside MobileNetV2-small's plan the 80 ->
1280 step went from 24 to 19 us, not 11: its 410 KB weight no longer stays in cache between
runs, and reading it (either way round) is then most of the step.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.depthwise import bound
from backends.numpy.jit.support import JIT, read_only

POSITIONS = 4
CHANNELS = 128


def applies(c: int, m: int, positions: int) -> bool:
    """Whether a 1x1 Conv of C -> M channels on planes of ``positions`` takes the loop."""
    return positions <= POSITIONS and m >= CHANNELS


@numba.njit(**JIT)
def pointwise_transposed(x, wt, bias, z, residual, y, low, high, acc):
    """y (N, M, P) = bound((W x + bias) (+ z)) with ``wt`` = W^T (C, M), x (N, C, P); ``z``
    (N, M, P) is read only when ``residual``; ``acc`` (4, M) is scratch. Each output sums
    its products in channel order, then adds the bias, then z, as the composed kernel
    does."""
    n, c, positions = x.shape
    m = wt.shape[1]
    zero = y.dtype.type(0)
    a0, a1, a2, a3 = acc[0], acc[1], acc[2], acc[3]
    for i in range(n):
        image = x[i]
        for base in range(0, positions, 4):
            count = min(4, positions - base)
            for j in range(m):
                a0[j] = zero
                a1[j] = zero
                a2[j] = zero
                a3[j] = zero
            for k in range(c):
                row, source = wt[k], image[k]
                v0 = source[base]  # (positions past the plane multiply zero, never stored)
                v1 = source[base + 1] if count > 1 else zero
                v2 = source[base + 2] if count > 2 else zero
                v3 = source[base + 3] if count > 3 else zero
                for j in range(m):
                    u = row[np.uint64(j)]
                    a0[np.uint64(j)] += v0 * u
                    a1[np.uint64(j)] += v1 * u
                    a2[np.uint64(j)] += v2 * u
                    a3[np.uint64(j)] += v3 * u
            for j in range(m):
                out, b = y[i, j], bias[j]
                for r in range(count):
                    value = acc[r, j] + b
                    if residual:
                        value = value + z[i, j, base + r]
                    out[base + r] = bound(value, low, high)


@numba.njit(**JIT)
def transpose_into(w, wt):
    """wt (C, M) = w (M, C)^T."""
    m, c = w.shape
    for o in range(m):
        for k in range(c):
            wt[k, o] = w[o, k]


class TransposedWeights:
    """W^T of a 1x1 Conv's weight, made on the first call and kept while the plan hands the
    same read-only array; ``get`` answers None for a writeable one (sgemm then runs)."""

    def __init__(self, m: int, c: int, dtype) -> None:
        self.shape, self.dtype = (c, m), np.dtype(dtype)
        self.transposed = self.acc = None  # (made on the first call: ``held_bytes``)
        self.source = None

    @property
    def held_bytes(self) -> int:
        """W^T and the accumulator rows, kept for the plan's life."""
        c, m = self.shape
        return (c + 4) * m * self.dtype.itemsize

    def get(self, w, flat):
        """W^T of the weight ``w`` (``flat``: its (M, C) view), or None when ``w`` is
        writeable."""
        if w is self.source:
            return self.transposed
        if w.flags.writeable:
            self.source = None
            return None
        if self.transposed is None:
            self.transposed = np.empty(self.shape, self.dtype)
            self.acc = np.empty((4, self.shape[1]), self.dtype)
        transpose_into(flat, self.transposed)
        self.source = w
        return self.transposed

    def warm(self) -> None:
        """Compile (or load from numba's disk cache) both loops for this dtype."""
        dtype = self.dtype
        if dtype in _warmed:
            return
        one = np.zeros((1, 1, 1), dtype)
        transpose_into(read_only(one[0]), one[0])  # (only a read-only weight is transposed)
        for bias in (one[0, 0], read_only(one[0, 0])):  # (a plan's bias is read only)
            pointwise_transposed(one, one[0], bias, one, False, one, dtype.type(0),
                                 dtype.type(0), np.zeros((4, 1), dtype))
        _warmed.add(dtype)


_warmed: set = set()
