"""Compiled Gemm and FusedGemm for a few rows: ``Y = act(alpha A B^T + beta C)`` with A of at
most ``ROWS`` rows, in one compiled call.

A linear layer at a small batch (an MLP or a classifier head at batch 1-32, PyTorch's Linear
exported with ``transB=1``) is a product with few rows and a wide weight. OpenBLAS's sgemm
packs the whole weight for it on every call: [8, 784] x [784, 256] takes 52 us in sgemm at
one thread, against 21 us in ``recurrent_math.matmul_nt``'s register tiles (dot products
along K, 4 rows by 4 columns at a time), and [2, 784] 43 us against 9 (measured on an
AVX-512 machine). One row is a matrix-vector product, where both are close (9.0 against
7.9 us).

At batch 1 such a layer is a microsecond or two of arithmetic, so what surrounds it counts as
much: the composed path (product, then NumPy's ``y += C`` and the activation's own pass, each
behind a layer of Python) spent 2.3 us of LeNet's 4.1 us FusedGemm 400->120+Relu around a
1.8 us product. Here the product, alpha, beta times C and the activation's bounds (none, Relu
or Clip: ``portable.ops.fused.activation_bounds``) are one compiled call, bound directly to the step
(``bind``): 4.1 -> 2.5 us there, and 1.8 -> 0.9 us for the 84->10 Gemm after it (numba's
dispatcher takes about 0.07 us a call plus 0.05 us an array argument, 0.02 us a scalar).

Only float32 with A not transposed and B transposed (B's rows are the weight's rows, read
contiguously) takes the loop; its dot products are summed in a vector order, not NumPy's,
so results agree to rounding. The epilogue rounds as the composed kernel does: ``y * alpha``,
then ``+ c * beta`` (each skipped when 1), then np.clip's maximum-then-minimum. Anything else
(float64, other transposes, more rows, another activation, a NaN bound) is prepared by the
kernel it replaces (the xp Gemm, or the composed FusedGemm, whose Gemm is this one), and a
call on a strided view runs that kernel too.
"""
from __future__ import annotations

import numba
import numpy as np

from backends.numpy.jit.depthwise import bound
from backends.numpy.jit.recurrent_math import matmul_nt
from backends.numpy.jit.support import JIT, read_only
from backends.xp.kernels.fused import kernels as xp_fused_kernels
from backends.xp.kernels.linalg import gemm as xp_gemm
from portable.backend import KernelContext, PreparedKernel, bound_kernel
from portable.ops.fused import activation_bounds

# The most rows A may have: the tiles beat sgemm 1.6x still at 32 rows of [*, 784] x [784,
# 256] (78 against 128 us); above that sgemm's packing pays for itself sooner.
ROWS = 32
_FLOAT32 = np.dtype(np.float32)


@numba.njit(**JIT)
def _epilogue(y, c, alpha, beta, row_step, col_step, low, high):
    """y = bound(y * alpha + c * beta) element by element, in the composed kernel's order
    (no fast-math: each step rounds as NumPy's pass does). C is read at ``i * row_step +
    j * col_step`` of its flat form: its broadcast to Y's shape without a copy."""
    kind = y.dtype.type
    scale, weight = kind(alpha), kind(beta)
    lo, hi = kind(low), kind(high)
    rows, cols = y.shape
    if c is None:  # (decided when the loop is compiled: None is a type of its own)
        for i in range(rows):
            out = y[i]
            for j in range(cols):
                v = out[j]
                if alpha != 1.0:
                    v = v * scale
                out[j] = bound(v, lo, hi)
        return
    flat = c.reshape(c.size)
    for i in range(rows):
        out = y[i]
        for j in range(cols):
            v = out[j]
            if alpha != 1.0:
                v = v * scale
            extra = flat[i * row_step + j * col_step]
            out[j] = bound(v + (extra if beta == 1.0 else extra * weight), lo, hi)


@numba.njit(**JIT)
def gemm_epilogue(a, b, c, y, alpha, beta, row_step, col_step, low, high):
    """y = bound(alpha * a @ b^T + beta * c, low, high) for C-contiguous a [M, K], b [N, K],
    y [M, N] and c (None, or broadcast to [M, N] by the steps)."""
    matmul_nt(a, b, y, y.dtype.type(0))
    _epilogue(y, c, alpha, beta, row_step, col_step, low, high)


def prepare(input_types, output_types, attrs):
    """The loop's arguments after the arrays, ``(alpha, beta, row_step, col_step, low,
    high)``, or None when the configuration is not the loop's (see the module docstring)."""
    a, b, y = input_types[0], input_types[1], output_types[0]
    c = input_types[2] if len(input_types) > 2 else None
    limits = activation_bounds(attrs)
    if not (limits is not None and a.dtype == b.dtype == y.dtype == _FLOAT32 and a.is_static
            and b.is_static and len(a.shape) == 2 and len(b.shape) == 2
            and not attrs["transA"] and attrs["transB"] and 1 <= a.shape[0] <= ROWS):
        return None
    row_step = col_step = 0
    if c is not None:
        if c.dtype != _FLOAT32 or not c.is_static or len(c.shape) > 2:
            return None
        rows, cols = (1,) * (2 - len(c.shape)) + tuple(c.shape)  # (unidirectional broadcast)
        row_step, col_step = (cols if rows > 1 else 0), (1 if cols > 1 else 0)
    return (float(attrs["alpha"]), float(attrs["beta"]), row_step, col_step, *limits)


def run(state, ctx, inputs, outputs, attrs) -> bool:
    """The loop on C-contiguous arrays; False (nothing written) for any other layout."""
    a, b, y = inputs[0], inputs[1], outputs[0]
    c = inputs[2] if len(inputs) > 2 else None
    if not (a.flags.c_contiguous and b.flags.c_contiguous and y.flags.c_contiguous
            and (c is None or c.flags.c_contiguous)):
        return False
    gemm_epilogue(a, b, c, y, *state)
    return True


_warmed: set = set()


def _warm(state, input_types, output_types) -> None:
    """Compile the loop for this step's signature (or load it from numba's disk cache) while
    planning: once per form of C (absent, or its rank) per process."""
    c = input_types[2] if len(input_types) > 2 else None
    key = None if c is None else len(c.shape)
    if key in _warmed:
        return
    arrays = [np.zeros(t.shape, t.dtype) for t in input_types[:2]]
    if c is not None:
        arrays.append(np.zeros(c.shape, c.dtype))
    out = [np.zeros(output_types[0].shape, output_types[0].dtype)]
    run(state, None, arrays, out, {})
    run(state, None, arrays[:1] + [read_only(a) for a in arrays[1:]], out, {})  # (constants)
    _warmed.add(key)


class _SmallGemm(PreparedKernel):
    """A Gemm or FusedGemm table entry of the compiled tier. ``bind`` hands back one closure
    that calls the loop (the fallback's own bound call where the loop does not apply);
    ``compiled_prepare`` / ``compiled_run`` are the loop alone, for the tests."""

    def __init__(self, fallback) -> None:
        super().__init__(self._run, self._prepare)
        self.__name__ = self.__qualname__ = getattr(fallback, "__name__", "gemm")
        self.fallback = fallback
        self.compiled_prepare, self.compiled_run = prepare, run

    def _prepare(self, backend, input_types, output_types, attrs):
        state = prepare(input_types, output_types, attrs)
        if state is None:
            return None, bound_kernel(self.fallback, backend, input_types, output_types, attrs)
        _warm(state, input_types, output_types)
        return state, None

    def _run(self, planned, ctx, inputs, outputs, attrs):
        state, other = planned
        if other is not None:
            return other(ctx, inputs, outputs, attrs)
        if not run(state, ctx, inputs, outputs, attrs):
            self.fallback(ctx, inputs, outputs, attrs)
        return None

    def bind(self, backend, input_types, output_types, attrs):
        state, other = self._prepare(backend, input_types, output_types, attrs)
        if other is not None:
            return other
        fallback = self.fallback
        alpha, beta, row_step, col_step, low, high = state

        def small_gemm(ctx: KernelContext, inputs, outputs, attrs) -> None:
            # (run()'s body, inlined: a Python call less on a step of a few microseconds)
            a, b, y = inputs[0], inputs[1], outputs[0]
            c = inputs[2] if len(inputs) > 2 else None
            if (a.flags.c_contiguous and b.flags.c_contiguous and y.flags.c_contiguous
                    and (c is None or c.flags.c_contiguous)):
                gemm_epilogue(a, b, c, y, alpha, beta, row_step, col_step, low, high)
            else:
                fallback(ctx, inputs, outputs, attrs)
        return small_gemm


gemm = _SmallGemm(xp_gemm)
fused_gemm = _SmallGemm(xp_fused_kernels["portable.FusedGemm"])

kernels = {"Gemm": gemm, "portable.FusedGemm": fused_gemm}
