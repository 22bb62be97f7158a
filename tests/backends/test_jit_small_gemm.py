"""The compiled Gemm for a few rows (backends/numpy/jit/small_gemm.py): ``alpha A B^T + beta C``
against a float64 reference for every row count it takes (1 to ROWS, partial 4-row tiles and
columns not a multiple of 4 included), each form of C, alpha and beta; and the cases it leaves
to the xp kernel (more rows, A transposed, B not transposed, float64, a strided view), which
must still be right. FusedGemm (the same loop with the activation's bounds inside) against the
same reference and against the plain NumPy tier (the xp Gemm, then the activation's kernel),
NaN and infinities included; other activations and configurations keep the composed kernel."""
from __future__ import annotations

import json

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit, kernel_table
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


# -- FusedGemm: the product, alpha/beta times C and the activation in one compiled call ------

def _fused_attrs(activation="", bounds=None, **gemm):
    return {**_attrs(**gemm), "activation": activation,
            "activation_attrs": json.dumps(bounds or {})}


def _plain_fused(inputs, y_shape, attrs):
    """FusedGemm as the plain NumPy tier runs it (PORTABLE_JIT=0's table: the xp Gemm, then
    the xp activation kernel in place)."""
    backend = pt.cpu().backend
    saved = backend.kernels
    backend.kernels = kernel_table(compiled=False)
    try:
        y = np.full(y_shape, np.nan, inputs[0].dtype)
        bound = bound_kernel(backend.kernels["portable.FusedGemm"], backend,
                             array_types(inputs), array_types([y]), attrs)
        bound(KernelContext(np, np.random.default_rng(0), backend), inputs, [y], attrs)
    finally:
        backend.kernels = saved
    return y


def _bound_fused(inputs, y, attrs):
    """The cpu backend's FusedGemm bound to this step, run into ``y``; whether the compiled
    loop was planned for it."""
    from backends.numpy.jit import small_gemm

    backend = pt.cpu().backend
    table = backend.kernel("portable.FusedGemm")
    assert table is jit.kernels["portable.FusedGemm"]
    bound = bound_kernel(table, backend, array_types(inputs), array_types([y]), attrs)
    bound(KernelContext(np, np.random.default_rng(0), backend), inputs, [y], attrs)
    planned = small_gemm.kernels["portable.FusedGemm"].compiled_prepare(
        array_types(inputs), array_types([y]), attrs)
    return planned is not None


def _activate(y, activation, bounds):
    if activation == "Relu":
        return np.maximum(y, 0)
    if activation == "Clip":
        return np.clip(y, bounds.get("min", -np.inf), bounds.get("max", np.inf))
    return y


@pytest.mark.parametrize("rows", [1, 3, 8, 32])
@pytest.mark.parametrize("activation,bounds", [("", None), ("Relu", None),
                                               ("Clip", {"min": -0.5, "max": 0.75}),
                                               ("Clip", {"max": 0.0})])
@pytest.mark.parametrize("bias", ["row", "matrix", "column", "scalar", "none"])
def test_fused_gemm_matches_the_plain_tier_and_a_float64_reference(rows, activation, bounds,
                                                                   bias):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 120)).astype(np.float32)
    w = rng.standard_normal((21, 120)).astype(np.float32)  # (21: partial tiles of 4 and 8)
    inputs = [a, w]
    if bias != "none":
        shape = {"row": (21,), "matrix": (rows, 21), "column": (rows, 1), "scalar": ()}[bias]
        inputs.append(rng.standard_normal(shape).astype(np.float32))
    attrs = _fused_attrs(activation, bounds, transB=1, alpha=0.5 if rows % 2 else 1.0,
                         beta=1.5 if rows > 4 else 1.0)
    y = np.full((rows, 21), np.nan, np.float32)
    assert _bound_fused(inputs, y, attrs)
    want = _activate(_reference(inputs, attrs), activation, bounds or {})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(y, _plain_fused(inputs, y.shape, attrs), rtol=1e-5, atol=1e-4)
    if activation == "Relu":
        assert (y >= 0).all()


def test_fused_gemm_relu_propagates_nan_and_keeps_infinities():
    """np.maximum(y, 0) keeps a NaN a NaN (the plain tier's Relu); inf stays inf."""
    a = np.ones((1, 8), np.float32)
    w = np.ones((5, 8), np.float32)
    c = np.array([np.nan, np.inf, -np.inf, -3.0, 3.0], np.float32)
    attrs = _fused_attrs("Relu", transB=1)
    y = np.zeros((1, 5), np.float32)
    assert _bound_fused([a, w, c], y, attrs)
    np.testing.assert_array_equal(y, _plain_fused([a, w, c], y.shape, attrs))
    np.testing.assert_array_equal(y, [[np.nan, np.inf, 0.0, 5.0, 11.0]])


@pytest.mark.parametrize("case", ["Sigmoid", "LeakyRelu", "NaN bound", "33 rows", "float64",
                                  "strided A"])
def test_other_fused_gemms_run_the_composed_kernel(case):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 64)).astype(np.float32)
    w = rng.standard_normal((16, 64)).astype(np.float32)
    c = rng.standard_normal((16,)).astype(np.float32)
    attrs, planned = _fused_attrs("Relu", transB=1), False
    if case == "Sigmoid":
        attrs = _fused_attrs("Sigmoid", transB=1)
    elif case == "LeakyRelu":
        attrs = _fused_attrs("LeakyRelu", {"alpha": 0.1}, transB=1)
    elif case == "NaN bound":
        attrs = _fused_attrs("Clip", {"min": float("nan")}, transB=1)
    elif case == "33 rows":
        a = rng.standard_normal((33, 64)).astype(np.float32)
    elif case == "float64":
        a, w, c = a.astype(np.float64), w.astype(np.float64), c.astype(np.float64)
    else:
        a = rng.standard_normal((4, 128)).astype(np.float32)[:, ::2]
        planned = True  # (planned for the loop; the strided call runs the composed kernel)
    y = np.full((a.shape[0], 16), -7, a.dtype)
    assert _bound_fused([a, w, c], y, attrs) == planned
    np.testing.assert_allclose(y, _plain_fused([a, w, c], y.shape, attrs), rtol=1e-5, atol=1e-5)
