"""The arithmetic of the compiled LSTM and GRU loops (``backends/numpy/jit/recurrent.py``):
a float32 tanh that vectorises, and small matrix products as register tiles.

- ``tanh(x)`` inside a loop: for float32 a rational approximation (Eigen's
  ``generic_fast_tanh_float``, the kind of approximation onnxruntime's MLAS uses too), with no
  call, so the loops around it vectorise: 0.2 ns an element against 17.6 ns for libm's
  ``tanhf`` (measured on an AVX-512 machine). Its error is at most 3.4e-7, absolute and
  relative (5.7 ulp near |x| = 6), against NumPy's 1.4 ulp. float64 keeps libm's ``tanh``.
- ``matmul_nt(a, b, out, zero)``: out = a @ b^T for the shapes of a recurrent step ([B, H] x
  [G, H], B small) and of the input projection. Dot products along the inner axis, 16 (4 x 4)
  or 8 (one row) at a time in registers, which LLVM vectorises with ``fastmath`` reassoc and
  contract (on these functions only: the sums are reordered, NaN and inf still propagate).
  [8, 64] x [64, 256]: 2.7-3.0 us against OpenBLAS's sgemm 7.5 us (mostly fixed cost: 6.3 us
  at [2, 64]); one row: 0.6 us against sgemv's 0.7. What is left is each dot product's
  horizontal sum, about half the time at 64 inputs: an outer-product tile would avoid it, but
  LLVM keeps no accumulator tile in registers when written in numba (tried: 10x slower).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload

from backends.numpy.jit.support import JIT

# Options of the products: the dot products' sums may be reassociated (vectorised along the
# inner axis) and multiply-adds fused; no other fast-math assumption (NaN and inf propagate).
_PRODUCT_JIT = dict(JIT, fastmath={"reassoc", "contract"})


def tanh(x):
    """tanh of a float scalar inside the loops: a rational approximation for float32, libm's
    for float64 (see the module docstring)."""
    return np.tanh(x)


@overload(tanh, jit_options=dict(JIT))
def _tanh_by_dtype(x):
    if isinstance(x, types.Float) and x.bitwidth == 32:
        return _tanh_float32
    return lambda x: np.tanh(x)


def _tanh_float32(x):
    # Eigen's generic_fast_tanh_float: odd degree-13 over even degree-6 polynomial on x
    # clamped to +-7.9053111 (where the float32 result is 1). min/max keep a NaN a NaN.
    limit = np.float32(7.90531110763549805)
    x = min(max(x, -limit), limit)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return x * p / q


@numba.njit(inline="always", **JIT)
def sigmoid(a, half):
    """The logistic function as the xp kernel computes it (``half``: 0.5 of a's dtype)."""
    return half * tanh(half * a) + half


@numba.njit(**_PRODUCT_JIT)
def row_times(a, b, out, zero):
    """out[j] = sum_k a[k] b[j, k] (one row: b's rows 8 at a time, 8 sums along k)."""
    cols, inner = b.shape
    j = 0
    while j + 8 <= cols:
        b0, b1, b2, b3 = b[j], b[j + 1], b[j + 2], b[j + 3]
        b4, b5, b6, b7 = b[j + 4], b[j + 5], b[j + 6], b[j + 7]
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
        for k in range(inner):
            v = a[k]
            s0 += v * b0[k]
            s1 += v * b1[k]
            s2 += v * b2[k]
            s3 += v * b3[k]
            s4 += v * b4[k]
            s5 += v * b5[k]
            s6 += v * b6[k]
            s7 += v * b7[k]
        out[j], out[j + 1], out[j + 2], out[j + 3] = s0, s1, s2, s3
        out[j + 4], out[j + 5], out[j + 6], out[j + 7] = s4, s5, s6, s7
        j += 8
    for j in range(j, cols):
        s = zero
        bj = b[j]
        for k in range(inner):
            s += a[k] * bj[k]
        out[j] = s


@numba.njit(**_PRODUCT_JIT)
def matmul_nt(a, b, out, zero):
    """out = a @ b^T for C-contiguous a [M, K], b [N, K], out [M, N].

    Blocks of 4 rows of a by 4 rows of b: 16 dot products along K in registers, each input
    row read once per block. A last block with fewer than 4 rows repeats its first row
    (computed, never stored), so no row count needs its own loop; a single row goes to
    ``row_times``. (Walking b outside and the rows of a inside, to read b once, measured
    1.3-3x slower up to [16, 256] x [1024, 256]: the row choice then sits in the inner loop.)
    """
    rows, inner = a.shape
    cols = b.shape[0]
    if rows == 1:
        row_times(a[0], b, out[0], zero)
        return
    for i in range(0, rows, 4):
        n = min(4, rows - i)
        a0 = a[i]
        a1 = a[i + 1] if n > 1 else a0
        a2 = a[i + 2] if n > 2 else a0
        a3 = a[i + 3] if n > 3 else a0
        j = 0
        while j + 4 <= cols:
            b0, b1, b2, b3 = b[j], b[j + 1], b[j + 2], b[j + 3]
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
            for k in range(inner):
                v0, v1, v2, v3 = a0[k], a1[k], a2[k], a3[k]
                w0, w1, w2, w3 = b0[k], b1[k], b2[k], b3[k]
                s00 += v0 * w0
                s01 += v0 * w1
                s02 += v0 * w2
                s03 += v0 * w3
                s10 += v1 * w0
                s11 += v1 * w1
                s12 += v1 * w2
                s13 += v1 * w3
                s20 += v2 * w0
                s21 += v2 * w1
                s22 += v2 * w2
                s23 += v2 * w3
                s30 += v3 * w0
                s31 += v3 * w1
                s32 += v3 * w2
                s33 += v3 * w3
            o = out[i]
            o[j], o[j + 1], o[j + 2], o[j + 3] = s00, s01, s02, s03
            if n > 1:
                o = out[i + 1]
                o[j], o[j + 1], o[j + 2], o[j + 3] = s10, s11, s12, s13
            if n > 2:
                o = out[i + 2]
                o[j], o[j + 1], o[j + 2], o[j + 3] = s20, s21, s22, s23
            if n > 3:
                o = out[i + 3]
                o[j], o[j + 1], o[j + 2], o[j + 3] = s30, s31, s32, s33
            j += 4
        for r in range(i, i + n):  # the last columns, one dot product each
            row_times(a[r], b[j:], out[r, j:], zero)


@numba.njit(**JIT)
def project(x2, w, bias, xw, zero):
    """xw = x2 @ w^T + bias: every step's input projection of one direction."""
    matmul_nt(x2, w, xw, zero)
    for row in range(xw.shape[0]):
        xr = xw[row]
        for j in range(xr.shape[0]):
            xr[j] += bias[j]
