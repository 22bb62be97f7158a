"""The OpenCL kernels that batch-1 inference leans on, against NumPy: the matrix-vector product
of a fully connected layer (``backends.opencl.gemv``), LRN's forward pass (one program per kind
of ``beta``) and dense Convs with few multiply-adds per output (through the GEMM, not the
direct kernel)."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("k, n, dtype", [(9216, 37, np.float32), (37, 19, np.float64),
                                         (1, 5, np.float32), (16, 1, np.float32),
                                         (301, 1001, np.float32)])
def test_gemv_matches_numpy_for_a_transposed_weight(backend, request, k, n, dtype):
    from backends.opencl.gemm import gemm
    from backends.opencl.gemv import gemv

    if dtype == np.float64:
        request.getfixturevalue("fp64")  # (skips where the device has no float64)

    xp = backend.xp
    rng = np.random.default_rng(k + n)
    a = rng.standard_normal((1, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)  # (out, in): Gemm's transB
    c = rng.standard_normal((1, n)).astype(dtype)
    da, dw, dc = xp.asarray(a), xp.asarray(w), xp.asarray(c)
    assert gemv(da, dw.T, dc, alpha=0.5, beta=2.0)  # (the layout it takes)
    want = 0.5 * (a.astype(np.float64) @ w.T.astype(np.float64)) + 2.0 * c
    tol = 1e-12 if dtype == np.float64 else 2e-5 * np.sqrt(k)
    np.testing.assert_allclose(dc.get(), want, rtol=tol, atol=tol)
    out = xp.asarray(np.full((1, n), np.nan, dtype))  # beta 0 never reads C (NaN stays out)
    gemm(da, dw.T, out)
    np.testing.assert_allclose(out.get(), a @ w.T, rtol=tol, atol=tol)


def test_gemv_declines_other_layouts_and_the_gemm_takes_them(backend):
    from backends.opencl.gemv import gemv

    xp = backend.xp
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 40)).astype(np.float32)
    b = rng.standard_normal((40, 30)).astype(np.float32)  # rows contiguous: not its layout
    da, db = xp.asarray(a), xp.asarray(b)
    c = xp.asarray(np.zeros((1, 30), np.float32))
    assert not gemv(da, db, c)
    assert not gemv(xp.asarray(a.astype(np.float16)), db.T.T.astype(np.float16),
                    xp.asarray(np.zeros((1, 30), np.float16)))
    np.testing.assert_allclose((da @ db).get(), a @ b, rtol=1e-4, atol=1e-4)


def _lrn_reference(x, size, alpha, beta, bias):
    """ONNX's LRN: x / (bias + alpha / size * sum of squares over the channel window)^beta."""
    square = np.square(x.astype(np.float64))
    total = np.zeros_like(square)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        total[:, c] = square[:, lo:hi + 1].sum(axis=1)
    return x / (bias + alpha / size * total) ** beta


@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0, 0.6])
@pytest.mark.parametrize("shape, size", [((2, 7, 5, 9), 5), ((1, 4, 33), 3), ((1, 3, 2, 2), 4)])
def test_lrn_matches_onnx_formula(backend, beta, shape, size):
    from backends.opencl.kernels import kernels

    xp = backend.xp
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32) * 3
    attrs = {"size": size, "alpha": 0.2, "beta": beta, "bias": 1.5}
    out = backend.empty(shape, np.float32)  # (as a plan's output: no host copy to drop)
    kernels["LRN"](None, [xp.asarray(x)], [out], attrs)
    np.testing.assert_allclose(out.get(), _lrn_reference(x, **attrs), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("x_shape, w_shape", [((1, 16, 11, 13), (8, 16, 1, 1)),
                                              ((2, 3, 9, 9), (5, 3, 1, 1)),
                                              ((1, 1, 10, 10), (4, 1, 3, 3))])
def test_dense_conv_with_few_terms_runs_the_gemm(backend, x_shape, w_shape):
    from backends.opencl.kernels.conv import Window, conv_forward, thin
    from portable.ops.conv import window_geometry

    xp = backend.xp
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    pad = w_shape[2] // 2
    attrs = {"kernel_shape": list(w_shape[2:]), "strides": [1, 1], "pads": [pad] * 4,
             "dilations": [1, 1], "group": 1, "auto_pad": "NOTSET"}
    win = Window.of(window_geometry(x_shape[2:], w_shape[2:], attrs), x_shape[2:])
    assert not thin(x_shape, 1, win)  # (C * kernel <= 16, yet dense: the GEMM's)
    y = backend.empty((x_shape[0], w_shape[0]) + tuple(win.out[1:]), np.float32)
    conv_forward(xp.asarray(x), xp.asarray(w), None, win, 1, y)
    padded = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)]).astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(padded, w_shape[2:], axis=(2, 3))
    want = np.einsum("nchwij,mcij->nmhw", windows, w.astype(np.float64))
    np.testing.assert_allclose(y.get(), want, rtol=1e-5, atol=1e-5)
