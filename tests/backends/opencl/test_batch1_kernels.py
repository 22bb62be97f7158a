"""The OpenCL kernels that batch-1 inference leans on, against NumPy: the matrix-vector product
of a fully connected layer (``backends.opencl.gemv``), LRN's forward pass (one program per kind
of ``beta``), dense Convs with few multiply-adds per output (through the GEMM, not the direct
kernel), the direct (depthwise) Conv and the forward pools (row window kernels, run as on CPUs
and as on GPUs), and Convs through im2col into the GEMM's packed panels."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(params=["whole rows", "runs of 5"])
def row_run(request, backend, monkeypatch):
    """The row window kernels as CPUs run them (a work-item per row) and as GPUs do (runs
    of a few outputs of a row: here 5, so that runs end inside a row's edges)."""
    if request.param == "runs of 5":
        monkeypatch.setattr(backend.runtime, "row_run", 5)
    return backend.runtime.row_run


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


def _grouped_conv_reference(x, w, bias, group, strides, pads, dilations):
    """A grouped 2-D Conv in float64 from NumPy's sliding windows (pads: top, left, bottom,
    right as ONNX orders them)."""
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    kh, kw = w.shape[2:]
    span = ((kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1)
    windows = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    windows = windows[:, :, ::strides[0], ::strides[1], ::dilations[0], ::dilations[1]]
    n, c = x.shape[:2]
    m = w.shape[0]
    xs = windows.reshape((n, group, c // group) + windows.shape[2:])
    ws = w.astype(np.float64).reshape(group, m // group, c // group, kh, kw)
    y = np.einsum("ngchwij,gmcij->ngmhw", xs, ws).reshape((n, m) + windows.shape[2:4])
    return y + bias.astype(np.float64)[None, :, None, None]


def _conv_case(x_shape, w_shape, group, stride, pad, dilation, seed):
    """Random float32 X, W and bias of a square-windowed 2-D Conv, its ``Window`` and the
    float64 reference of its output."""
    from backends.opencl.kernels.conv import Window
    from portable.ops.conv import window_geometry

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    attrs = {"kernel_shape": list(w_shape[2:]), "strides": [stride] * 2, "pads": [pad] * 4,
             "dilations": [dilation] * 2, "group": group, "auto_pad": "NOTSET"}
    win = Window.of(window_geometry(x_shape[2:], w_shape[2:], attrs), x_shape[2:])
    want = _grouped_conv_reference(x, w, bias, group, [stride] * 2, [pad] * 4, [dilation] * 2)
    return x, w, bias, win, want


# depthwise shapes of ShuffleNet and MobileNet (rows of 56, 28, 14, 7 at strides 1 and 2), 5x5
# (with a channel multiplier) and 7x7 windows, a dilated window, a stride of 3 with no padding
# and grouped 1x1s with 4 inputs a group (the general path)
@pytest.mark.parametrize("x_shape, w_shape, group, stride, pad, dilation", [
    ((1, 8, 56, 56), (8, 1, 3, 3), 8, 1, 1, 1),
    ((1, 8, 28, 28), (8, 1, 3, 3), 8, 2, 1, 1),
    ((2, 6, 14, 14), (6, 1, 3, 3), 6, 1, 1, 1),
    ((1, 5, 7, 7), (5, 1, 3, 3), 5, 2, 1, 1),
    ((1, 3, 9, 37), (6, 1, 5, 5), 3, 1, 2, 1),
    ((1, 4, 16, 20), (4, 1, 7, 7), 4, 1, 3, 1),
    ((1, 4, 20, 33), (4, 1, 3, 3), 4, 1, 2, 2),
    ((1, 4, 19, 41), (4, 1, 3, 3), 4, 3, 0, 1),
    ((1, 16, 12, 30), (8, 4, 1, 1), 4, 1, 0, 1)])
def test_direct_conv_matches_numpy(backend, row_run, x_shape, w_shape, group, stride, pad,
                                   dilation):
    """The direct kernel (a row per work-item: the outputs whose windows lie inside the
    input in a plain loop, the edges and the rows at the borders with their taps tested)
    against a float64 reference."""
    from backends.opencl.kernels.conv import conv_forward, thin

    xp = backend.xp
    x, w, bias, win, want = _conv_case(x_shape, w_shape, group, stride, pad, dilation, 6)
    assert thin(x_shape, group, win)
    y = backend.empty((x_shape[0], w_shape[0]) + tuple(win.out[1:]), np.float32)
    conv_forward(xp.asarray(x), xp.asarray(w), xp.asarray(bias), win, group, y)
    np.testing.assert_allclose(y.get(), want, rtol=1e-5, atol=1e-5)


def _pool_reference(x, op, kernel, stride, pad, dilation, include_pad):
    """MaxPool / AveragePool (2-D, symmetric pads) in float64 from NumPy's sliding windows."""
    fill = -np.inf if op == "MaxPool" else 0.0
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pad, pad)] * 2,
                    constant_values=fill)
    span = (kernel - 1) * dilation + 1
    windows = np.lib.stride_tricks.sliding_window_view(padded, (span, span), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride, ::dilation, ::dilation]
    if op == "MaxPool":
        return windows.max(axis=(-2, -1))
    inside = np.pad(np.ones(x.shape[2:]), pad)
    counts = np.lib.stride_tricks.sliding_window_view(inside, (span, span))
    counts = counts[::stride, ::stride, ::dilation, ::dilation].sum(axis=(-2, -1))
    return windows.sum(axis=(-2, -1)) / (kernel * kernel if include_pad else counts)


# the stems of ShuffleNet, SqueezeNet and AlexNet, a padded 3x3/1 AveragePool both ways,
# a dilated window and a row too short for an inside part
@pytest.mark.parametrize("op, x_shape, kernel, stride, pad, dilation, include_pad", [
    ("MaxPool", (1, 24, 112, 112), 3, 2, 1, 1, 0),
    ("MaxPool", (1, 96, 109, 109), 3, 2, 0, 1, 0),
    ("MaxPool", (2, 5, 30, 41), 3, 1, 1, 2, 0),
    ("AveragePool", (1, 8, 28, 28), 3, 1, 1, 1, 0),
    ("AveragePool", (1, 8, 28, 28), 3, 1, 1, 1, 1),
    ("AveragePool", (1, 6, 15, 17), 2, 2, 0, 1, 0),
    ("AveragePool", (1, 3, 4, 3), 3, 1, 1, 1, 0)])
def test_pools_match_numpy(backend, device, row_run, op, x_shape, kernel, stride, pad,
                           dilation, include_pad):
    """The forward pools (a row per work-item, taps unrolled) through a compiled plan."""
    from portable.executor.compiled import CompiledGraph
    from portable.ir import GraphBuilder, TensorType

    x = np.random.default_rng(7).standard_normal(x_shape).astype(np.float32)
    attrs = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4}
    if op == "MaxPool":
        attrs["dilations"] = [dilation] * 2
    else:
        attrs["count_include_pad"] = include_pad
    builder = GraphBuilder("pool")
    builder.op(op, builder.input("x", x_shape, np.float32), outputs=["y"], name="pool", **attrs)
    plan = CompiledGraph(builder.build(["y"]), device, {"x": TensorType(x_shape, np.float32)},
                         keep=["y"])
    y = plan.run({"x": backend.from_numpy(x)})[0]
    want = _pool_reference(x, op, kernel, stride, pad, dilation, include_pad)
    np.testing.assert_allclose(backend.to_numpy(y), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("x_shape, w_shape, group, stride, pad, dilation", [
    ((1, 5, 23, 29), (7, 5, 3, 3), 1, 1, 1, 1),
    ((2, 4, 31, 17), (6, 2, 3, 3), 2, 2, 1, 1),
    ((1, 3, 20, 21), (4, 3, 5, 5), 1, 1, 2, 2)])
def test_packed_columns_conv_matches_numpy(backend, x_shape, w_shape, group, stride, pad,
                                          dilation):
    """im2col into the GEMM's packed panels (runs of panels per work-item, panels that
    cross output rows) for Convs with many terms per output, against float64."""
    from backends.opencl.kernels.conv import _uses_columns, conv_forward

    xp = backend.xp
    x, w, bias, win, want = _conv_case(x_shape, w_shape, group, stride, pad, dilation, 8)
    assert _uses_columns(x_shape, w_shape, group, win)
    y = backend.empty((x_shape[0], w_shape[0]) + tuple(win.out[1:]), np.float32)
    for _ in range(2):  # (the second call through the kept launches)
        conv_forward(xp.asarray(x), xp.asarray(w), xp.asarray(bias), win, group, y)
        np.testing.assert_allclose(y.get(), want, rtol=1e-4, atol=1e-4)
