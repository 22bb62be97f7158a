"""OpenCL kernels: MatMul and Gemm on the packed, register-blocked GEMM; Einsum; Trilu; Det and
portable.Inverse (one work-item per matrix); portable.Syevd and portable.Gelqf are refused (an
eigen- or LQ decomposition is iterative LAPACK work this backend does not write): run them on the
CPU, or allow the explicit CPU fallback."""
from __future__ import annotations

import math

import numpy as np

from portable.errors import BackendError
from portable.ops.linalg import parse_einsum, trilu_mask

from backends.opencl.allocator import empty, host_value
from backends.opencl.arrayops import matmul
from backends.opencl.codegen import MAX_RANK, int8_arg, peel_axes
from backends.opencl.elementwise import apply, assign
from backends.opencl.fallback import host_only_kernel
from backends.opencl.gemm import gemm as run_gemm
from backends.opencl.kernels.table import kernel_table
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()


@kernel("MatMul")
def matmul_kernel(ctx, inputs, outputs, attrs):
    matmul(inputs[0], inputs[1], outputs[0])


@kernel("Gemm")
def gemm_kernel(ctx, inputs, outputs, attrs):
    a = inputs[0].T if attrs["transA"] else inputs[0]
    b = inputs[1].T if attrs["transB"] else inputs[1]
    y = outputs[0]
    c = inputs[2] if len(inputs) > 2 else None
    beta = 0.0
    if c is not None and attrs["beta"] != 0.0:
        assign(y, c)  # broadcast C into Y, then Y = alpha A B + beta Y
        beta = attrs["beta"]
    run_gemm(a, b, y, attrs["alpha"], beta)


# -- Einsum --------------------------------------------------------------------------------------

_MAX_OPERANDS = 4


def _einsum_source(dtype, count: int) -> str:
    c = ctype(dtype)
    names = [f"a{k}" for k in range(count)]
    params = ["const int n", "const int orank", "const int8 oshape",
              f"__global {c.storage}* y", "const int y_off", "const int8 y_st",
              "const int srank", "const int8 sshape", "const int total"]
    for a in names:
        params += [f"__global const {c.storage}* {a}", f"const int {a}_off",
                   f"const int8 {a}_ost", f"const int8 {a}_sst"]
    decode_out = peel_axes("r", "orank", "oshape", lambda d: f"yi += c * y_st.s{d}; " + " ".join(
        f"{a}_b += c * {a}_ost.s{d};" for a in names))
    decode_sum = peel_axes("r", "srank", "sshape", lambda d: " ".join(
        f"{a}_i += c * {a}_sst.s{d};" for a in names))
    product = " * ".join(f"{a}[{a}_i]" for a in names)
    return preamble([dtype]) + f"""
__kernel void einsum({', '.join(params)}) {{
  const int i = get_global_id(0);
  if (i >= n) return;
  int r = i, yi = y_off;
  {' '.join(f'int {a}_b = {a}_off;' for a in names)}
  {decode_out}
  {c.compute} acc = 0;
  for (int s = 0; s < total; ++s) {{
    r = s;
    {' '.join(f'int {a}_i = {a}_b;' for a in names)}
    {decode_sum}
    acc += {product};
  }}
  y[yi] = acc;
}}
"""


@kernel("Einsum")
def einsum(ctx, inputs, outputs, attrs):
    """One work-item per output element sums the products over the contracted labels; a
    label repeated in a term (a diagonal) adds its strides, a broadcast axis has stride 0."""
    out = outputs[0]
    spec = parse_einsum(attrs["equation"], [x.shape for x in inputs])
    if len(inputs) > _MAX_OPERANDS:
        raise BackendError(f"Einsum with {len(inputs)} operands: the OpenCL kernel takes at "
                           f"most {_MAX_OPERANDS}")
    summed = [label for label in dict.fromkeys("".join(spec.inputs)) if label not in spec.output]
    if len(spec.output) > MAX_RANK or len(summed) > MAX_RANK:
        raise BackendError(f"Einsum {attrs['equation']!r} has more than {MAX_RANK} labels on "
                           f"one side")
    runtime = out.runtime
    target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
    args = [np.int32(target.size), np.int32(len(spec.output)),
            int8_arg([spec.sizes[lb] for lb in spec.output]), target.buffer,
            np.int32(target.offset), int8_arg(target.strides), np.int32(len(summed)),
            int8_arg([spec.sizes[lb] for lb in summed]),
            np.int32(math.prod(spec.sizes[lb] for lb in summed))]
    for x, term in zip(inputs, spec.inputs):
        strides: dict[str, int] = {}
        for label, dim, stride in zip(term, x.shape, x.strides):
            if dim == spec.sizes[label]:  # else a broadcast size-1 axis: stride 0
                strides[label] = strides.get(label, 0) + stride
        args += [x.buffer, np.int32(x.offset), int8_arg([strides.get(lb, 0) for lb in spec.output]),
                 int8_arg([strides.get(lb, 0) for lb in summed])]
    if target.size:
        kern = runtime.kernel(_einsum_source(out.dtype, len(inputs)), "einsum")
        runtime.launch1d(kern, target.size, *args)
    if target is not out:
        assign(out, target)


@kernel("Trilu", half="native")
def trilu(ctx, inputs, outputs, attrs):
    # the (rows, cols) mask, uploaded, broadcast over the stack by the elementwise Where
    x = inputs[0]
    given = inputs[1] if len(inputs) > 1 else None
    k = 0 if given is None else int(np.asarray(host_value(given)).reshape(()))
    keep = trilu_mask(x.shape[-2], x.shape[-1], k, bool(attrs["upper"]))
    apply("Where", keep, x, x.dtype.type(0), out=outputs[0])


# -- Det and Inverse -----------------------------------------------------------------------------
# One work-item per matrix of the stack eliminates a contiguous scratch copy of it in global
# memory with partial pivoting (the largest magnitude in the column below the diagonal), in the
# compute dtype (float16 is upcast to float32 by the table). Meant for the small matrices
# (covariances, transforms) these ops are used on: one matrix costs O(M^3) on one work-item.


def _det_source(dtype) -> str:
    c = ctype(dtype)
    t = c.compute
    return preamble([dtype]) + f"""
__kernel void det(const int n, const int m, __global {t}* a, const int a_off,
                  __global {c.storage}* y, const int y_off) {{
  const int b = get_global_id(0);
  if (b >= n) return;
  __global {t}* w = a + a_off + (long)b * m * m;
  {t} det = 1;
  for (int k = 0; k < m; ++k) {{
    int p = k;
    {t} best = fabs(w[k * m + k]);
    for (int i = k + 1; i < m; ++i) {{
      const {t} v = fabs(w[i * m + k]);
      if (v > best) {{ best = v; p = i; }}
    }}
    if (best == 0) {{ det = 0; break; }}  /* singular: LU would divide by zero */
    if (p != k) {{
      for (int j = k; j < m; ++j) {{
        const {t} s = w[k * m + j]; w[k * m + j] = w[p * m + j]; w[p * m + j] = s;
      }}
      det = -det;
    }}
    const {t} pivot = w[k * m + k];
    det *= pivot;
    for (int i = k + 1; i < m; ++i) {{
      const {t} f = w[i * m + k] / pivot;
      for (int j = k + 1; j < m; ++j) w[i * m + j] -= f * w[k * m + j];
    }}
  }}
  {c.store("y", "y_off + b", "det")};
}}
"""


def _inverse_source(dtype) -> str:
    c = ctype(dtype)
    t = c.compute
    return preamble([dtype]) + f"""
__kernel void inverse(const int n, const int m, __global {t}* a, const int a_off,
                      __global {t}* y, const int y_off) {{
  const int b = get_global_id(0);
  if (b >= n) return;
  __global {t}* w = a + a_off + (long)b * m * m;
  __global {t}* v = y + y_off + (long)b * m * m;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) v[i * m + j] = (i == j) ? 1 : 0;
  /* Gauss-Jordan on [w | v]: w becomes the identity, v the inverse */
  for (int k = 0; k < m; ++k) {{
    int p = k;
    {t} best = fabs(w[k * m + k]);
    for (int i = k + 1; i < m; ++i) {{
      const {t} s = fabs(w[i * m + k]);
      if (s > best) {{ best = s; p = i; }}
    }}
    if (p != k) {{
      for (int j = k; j < m; ++j) {{
        const {t} s = w[k * m + j]; w[k * m + j] = w[p * m + j]; w[p * m + j] = s;
      }}
      for (int j = 0; j < m; ++j) {{
        const {t} s = v[k * m + j]; v[k * m + j] = v[p * m + j]; v[p * m + j] = s;
      }}
    }}
    const {t} r = 1 / w[k * m + k];  /* a singular matrix gives inf / nan */
    for (int j = k + 1; j < m; ++j) w[k * m + j] *= r;
    for (int j = 0; j < m; ++j) v[k * m + j] *= r;
    for (int i = 0; i < m; ++i) {{
      if (i == k) continue;
      const {t} f = w[i * m + k];
      if (f == 0) continue;
      for (int j = k + 1; j < m; ++j) w[i * m + j] -= f * w[k * m + j];
      for (int j = 0; j < m; ++j) v[i * m + j] -= f * v[k * m + j];
    }}
  }}
}}
"""


def _stack(x) -> tuple[int, int]:
    """(number of matrices, M) of a stack of square matrices (..., M, M)."""
    m = x.shape[-1]
    return math.prod(x.shape[:-2]), m


def _per_matrix(source: str, name: str, x, out, count: int, m: int) -> None:
    """Run ``name`` from ``source`` with one work-item per matrix of the stack ``x``, on a
    scratch copy of it (eliminated in place), writing ``out``."""
    runtime = out.runtime
    scratch = x.copy()
    target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
    kern = runtime.kernel(source, name)
    runtime.launch1d(kern, count, np.int32(count), np.int32(m), scratch.buffer,
                     np.int32(scratch.offset), target.buffer, np.int32(target.offset))
    if target is not out:
        assign(out, target)


@kernel("Det")
def det(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    count, m = _stack(x)
    if not count:
        return
    if m == 0:  # the empty product
        out.fill(1)
        return
    _per_matrix(_det_source(out.dtype), "det", x, out, count, m)


@kernel("portable.Inverse")
def inverse(ctx, inputs, outputs, attrs):
    """Gauss-Jordan elimination with partial pivoting. Unlike the NumPy kernel, a singular
    matrix is not refused (the device cannot raise): its inverse comes out inf or nan."""
    x, out = inputs[0], outputs[0]
    count, m = _stack(x)
    if count and m:
        _per_matrix(_inverse_source(out.dtype), "inverse", x, out, count, m)


# -- Syevd and Gelqf: refused ------------------------------------------------------------------


for _op, _what in (("portable.Syevd", "symmetric eigendecomposition"),
                  ("portable.Gelqf", "LQ factorisation")):
    kernel(_op, half="native")(host_only_kernel(
        _op, lambda attrs, op=_op, what=_what: f"{op} ({what}) has no OpenCL kernel"))
