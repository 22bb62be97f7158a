"""Compiled Gemm for a few rows: ``Y = alpha A B^T + beta C`` with A of at most ``ROWS`` rows.

A linear layer at a small batch (an MLP or a classifier head at batch 1-32, PyTorch's Linear
exported with ``transB=1``) is a product with few rows and a wide weight. OpenBLAS's sgemm
packs the whole weight for it on every call: [8, 784] x [784, 256] takes 52 us in sgemm at
one thread, against 21 us in ``recurrent_math.matmul_nt``'s register tiles (dot products
along K, 4 rows by 4 columns at a time), and [2, 784] 43 us against 9 (measured on an
AVX-512 machine). One row is a matrix-vector product, where both are close (9.0 against
7.9 us).

Only float32 with A not transposed and B transposed (B's rows are the weight's rows, read
contiguously) takes the loop; its dot products are summed in a vector order, not NumPy's,
so results agree to rounding. Anything else (float64, other transposes, more rows, a strided
view) runs the xp kernel.
"""
from __future__ import annotations

import numpy as np

from backends.numpy.jit.recurrent_math import matmul_nt
from backends.numpy.jit.support import contiguous, override
from backends.xp.kernels.linalg import gemm as xp_gemm
from backends.xp.kernels.linalg import gemm_scale_and_add

# The most rows A may have: the tiles beat sgemm 1.6x still at 32 rows of [*, 784] x [784,
# 256] (78 against 128 us); above that sgemm's packing pays for itself sooner.
ROWS = 32
_FLOAT32 = np.dtype(np.float32)


def _prepare(input_types, output_types, attrs):
    a, b, y = input_types[0], input_types[1], output_types[0]
    if not (a.dtype == b.dtype == y.dtype == _FLOAT32 and a.is_static and b.is_static
            and len(a.shape) == 2 and len(b.shape) == 2 and not attrs["transA"]
            and attrs["transB"] and 1 <= a.shape[0] <= ROWS):
        return None
    return np.float32(0)


@override(xp_gemm, _prepare)
def gemm(zero, ctx, inputs, outputs, attrs) -> bool:
    a, b, y = inputs[0], inputs[1], outputs[0]
    if not contiguous(a, b, y):
        return False
    matmul_nt(a, b, y, zero)
    gemm_scale_and_add(inputs, y, attrs)
    return True


kernels = {"Gemm": gemm}
