"""Matrix-vector products: C (1 x N) = alpha * A (1 x K) @ B (K x N) + beta * C where each
column of B is contiguous: the Gemm of a fully connected layer at batch 1 (``transB``, as
exporters write those layers).

The packed GEMM (:mod:`backends.opencl.gemm`) would first copy all of B into panels (a layer's
weights: 151 MB for ZFNet's first one, more than the runtime keeps of packed copies, so they
were packed again at every run) to multiply them by a single row, in tiles of six rows of
which one is kept. Here B is read once, where it lies: a work-item per ``COLUMNS`` outputs
takes their dot products with A, each in two partial sums, reading A's elements once for all
of them. Other layouts, dtypes other than float32 and float64, batches and epilogues go
through the packed GEMM.

Example:
    >>> gemv(a, w.T, c, alpha=1.0, beta=0.0)   # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Any

import numpy as np

from backends.opencl.allocator import CLArray
from backends.opencl.scalars import ctype, preamble

COLUMNS = 4  # outputs per work-item: as many streams of B in flight
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _source(dtype: np.dtype) -> str:
    t = ctype(dtype).compute
    cols = range(COLUMNS)
    sums = ", ".join(f"s{j}_{h} = 0" for j in cols for h in (0, 1))
    pointers = " ".join(f"__global const {t}* b{j} = b + b_off + (size_t)min(n0 + {j}, N - 1)"
                        f" * b_ns;" for j in cols)
    step = " ".join(f"s{j}_0 += x0 * b{j}[k]; s{j}_1 += x1 * b{j}[k + 1];" for j in cols)
    rest = " ".join(f"s{j}_0 += x0 * b{j}[k];" for j in cols)
    stores = " ".join(
        f"if (n0 + {j} < N) {{ const int at = c_off + (n0 + {j}) * c_ns; "
        f"{t} value = alpha * (s{j}_0 + s{j}_1); if (beta != 0) value += beta * c[at]; "
        f"c[at] = value; }}" for j in cols)
    return preamble([dtype]) + f"""
__kernel void gemv_columns(const int N, const int K, __global const {t}* a, const int a_off,
                           const int a_ks, __global const {t}* b, const int b_off,
                           const int b_ns, __global {t}* c, const int c_off, const int c_ns,
                           const {t} alpha, const {t} beta) {{
  const int n0 = get_global_id(0) * {COLUMNS};
  if (n0 >= N) return;
  {pointers}
  {t} {sums};
  int k = 0;
  for (; k + 2 <= K; k += 2) {{
    const {t} x0 = a[a_off + k * a_ks], x1 = a[a_off + (k + 1) * a_ks];
    {step}
  }}
  for (; k < K; ++k) {{
    const {t} x0 = a[a_off + k * a_ks];
    {rest}
  }}
  {stores}
}}
"""


def _kernel(runtime: Any, dtype: np.dtype):
    memo = runtime.memo("gemv")
    hit = memo.get(dtype.name)
    if hit is None:
        hit = memo[dtype.name] = runtime.kernel(_source(dtype), "gemv_columns")
    return hit


def gemv(a: CLArray, b: CLArray, c: CLArray, alpha: float = 1.0, beta: float = 0.0) -> bool:
    """``c = alpha * a @ b + beta * c`` for a (1, K), b (K, N) with contiguous columns and
    c (1, N), in float32 or float64 (``beta = 0`` never reads c). Returns False, having done
    nothing, for anything else."""
    if (c.dtype not in _DTYPES or a.ndim != 2 or b.ndim != 2 or c.ndim != 2
            or c.shape[0] != 1 or (b.strides[0] != 1 and b.shape[0] != 1)):
        return False
    k, n = b.shape
    runtime = c.runtime
    runtime.touch(c)
    t = ctype(c.dtype)
    runtime.launch1d(_kernel(runtime, c.dtype), -(-n // COLUMNS), np.int32(n), np.int32(k),
                     a.buffer, np.int32(a.offset), np.int32(a.strides[1]), b.buffer,
                     np.int32(b.offset), np.int32(b.strides[1]), c.buffer, np.int32(c.offset),
                     np.int32(c.strides[1]), t.scalar(alpha), t.scalar(beta))
    return True
