"""The compiled Gemm for a few rows (backends/numpy/jit/small_gemm.py): ``alpha A B^T + beta C``
against a float64 reference for every row count it takes (1 to ROWS, partial 4-row tiles and
columns not a multiple of 4 included), each form of C, alpha and beta; and the cases it leaves
to the xp kernel (more rows, A transposed, B not transposed, float64, a strided view), which
must still be right."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def _attrs(**given):
    return {key: given.get(key, spec.default) for key, spec in registry.get("Gemm").attrs.items()}


def _gemm(inputs, attrs):
    """(Y from the cpu backend's Gemm, whether the compiled loop was planned for it)."""
    from backends.numpy.jit import small_gemm

    a = inputs[0].T if attrs["transA"] else inputs[0]
    b = inputs[1].T if attrs["transB"] else inputs[1]
    y = np.full((a.shape[0], b.shape[1]), np.nan, a.dtype)  # (stale values must not leak)
    backend = pt.cpu().backend
    table = backend.kernel("Gemm")
    assert table is jit.kernels["Gemm"]
    bound = bound_kernel(table, backend, array_types(inputs), array_types([y]), attrs)
    bound(KernelContext(np, np.random.default_rng(0), backend), inputs, [y], attrs)
    planned = small_gemm.kernels["Gemm"].compiled_prepare(array_types(inputs), array_types([y]),
                                                          attrs)
    return y, planned is not None


def _reference(inputs, attrs):
    a, b = (x.astype(np.float64) for x in inputs[:2])
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    y = attrs["alpha"] * (a @ b)
    if len(inputs) > 2:
        y = y + attrs["beta"] * inputs[2].astype(np.float64)
    return y


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 32])
@pytest.mark.parametrize("bias", ["row", "matrix", "scalar", "none"])
def test_few_rows_match_a_float64_reference(rows, bias):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 300)).astype(np.float32)
    w = rng.standard_normal((37, 300)).astype(np.float32)  # (37 columns: a partial tile)
    inputs = [a, w]
    if bias != "none":
        shape = {"row": (37,), "matrix": (rows, 37), "scalar": ()}[bias]
        inputs.append(rng.standard_normal(shape).astype(np.float32))
    attrs = _attrs(transB=1, alpha=0.5 if rows % 2 else 1.0, beta=2.0 if rows % 3 else 1.0)
    got, compiled = _gemm(inputs, attrs)
    assert compiled
    np.testing.assert_allclose(got, _reference(inputs, attrs), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", ["33 rows", "A transposed", "B not transposed", "float64",
                                  "strided A"])
def test_other_gemms_run_the_xp_kernel(case):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    w = rng.standard_normal((16, 64)).astype(np.float32)
    attrs = _attrs(transB=1)
    planned = False
    if case == "33 rows":
        a = rng.standard_normal((33, 64)).astype(np.float32)
    elif case == "A transposed":
        a, attrs = np.ascontiguousarray(a.T), _attrs(transA=1, transB=1)
    elif case == "B not transposed":
        w, attrs = np.ascontiguousarray(w.T), _attrs()
    elif case == "float64":
        a, w = a.astype(np.float64), w.astype(np.float64)
    else:
        a = rng.standard_normal((8, 128)).astype(np.float32)[:, ::2]
        planned = True  # (planned for the loop; the strided call runs the xp kernel)
    got, compiled = _gemm([a, w], attrs)
    assert compiled == planned
    np.testing.assert_allclose(got, _reference([a, w], attrs), rtol=1e-5, atol=1e-4)
