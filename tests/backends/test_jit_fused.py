"""The compiled FusedConv (backends/numpy/jit/fused_conv.py), the depthwise Conv's
channel-inner loop, and the short-reduction path of the xp ReduceMean/ReduceSum and
GlobalAveragePool kernels.

FusedConv results are checked against a float64 reference (the direct depthwise loop of
test_jit_kernels, or the xp Conv kernel in float64, then np.clip) and against the plain NumPy
tier (PORTABLE_JIT=0's table: the xp Conv, then the xp activation kernel); reductions against
np.mean / np.sum in float64."""
from __future__ import annotations

import json

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit, kernel_table
from backends.xp.kernels import kernels as xp_kernels
from backends.xp.kernels.reduce import SHORT_REDUCTION, short_trailing_sum
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry
from portable.ops.conv import window_geometry
from tests.backends.test_jit_kernels import depthwise_reference

needs_numba = pytest.mark.skipif(not jit.available(),
                                 reason="numba is not installed (pip install 'portable[jit]')")


def _ctx(backend=None):
    return KernelContext(xp=np, rng=np.random.default_rng(0),
                         backend=backend or pt.cpu().backend)


def _attrs(op: str, **given) -> dict:
    return {key: given.get(key, spec.default) for key, spec in registry.get(op).attrs.items()}


def _fused_attrs(activation: str, bounds: dict | None = None, **conv) -> dict:
    return _attrs("portable.FusedConv", activation=activation,
                  activation_attrs=json.dumps(bounds or {}), **conv)


def _reference(x, w, b, z, attrs, activation, bounds):
    """Y in float64: Conv (the direct depthwise loop, or the xp Conv kernel on float64), plus
    Z, then the activation by NumPy's own rules."""
    conv_attrs = {k: v for k, v in attrs.items() if k in registry.get("Conv").attrs}
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    b64 = None if b is None else b.astype(np.float64)
    geom = window_geometry(x.shape[2:], w.shape[2:], conv_attrs)
    if conv_attrs["group"] > 1:
        y = depthwise_reference(x64, w64, b64, geom)
    else:
        y = np.empty((x.shape[0], w.shape[0]) + geom.out)
        xp_kernels["Conv"](_ctx(), [x64, w64] + ([] if b is None else [b64]), [y], conv_attrs)
    if z is not None:
        y = y + z
    if activation == "Relu":
        y = np.maximum(y, 0)
    elif activation == "Clip":
        y = np.clip(y, bounds.get("min", -np.inf), bounds.get("max", np.inf))
    elif activation == "LeakyRelu":
        y = np.where(y < 0, 0.01 * y, y)
    return y


def _plain_numpy(inputs, shape, dtype, attrs):
    """The FusedConv of the NumPy tier without compiled kernels (composed xp kernels)."""
    backend = pt.cpu().backend
    saved = backend.kernels
    backend.kernels = kernel_table(compiled=False)
    try:
        y = np.full(shape, -7, dtype)
        bound = bound_kernel(xp_kernels["portable.FusedConv"], backend, array_types(inputs),
                             array_types([y]), attrs)
        bound(_ctx(backend), inputs, [y], attrs)
    finally:
        backend.kernels = saved
    return y


def _compiled(inputs, shape, dtype, attrs):
    """(Y from the compiled tier's table entry, bound as a plan binds it, which path it took)."""
    kernel = jit.kernels["portable.FusedConv"]
    fused = jit._load("portable.FusedConv")
    y = np.full(shape, -7, dtype)
    planned = fused.compiled_prepare(array_types(inputs), array_types([y]), attrs)
    bound = bound_kernel(kernel, pt.cpu().backend, array_types(inputs),
                         array_types([y]), attrs)
    bound(_ctx(), inputs, [y], attrs)
    return y, None if planned is None else planned[0]


def _tol(dtype, scale=1.0):
    """Tolerances of a float32 or float64 sum; ``scale``: the result's largest magnitude (a
    long float32 sum's rounding grows with its terms, not with the value it ends at)."""
    atol = max(1.0, scale) * (1e-5 if dtype == np.float32 else 1e-12)
    return dict(rtol=1e-5, atol=atol) if dtype == np.float32 else dict(rtol=1e-12, atol=atol)


CLIP6 = {"min": 0.0, "max": 6.0}
# (N, C, size, M, kernel, stride, group, activation, bounds, residual, dtype, expected path)
CONFIGS = [
    (1, 240, 2, 240, 3, 1, 240, "Clip", CLIP6, False, np.float32, "depthwise"),  # channels
    (2, 144, 4, 144, 3, 2, 144, "Relu", None, False, np.float32, "depthwise"),  # channels
    (1, 32, 5, 32, 3, 1, 32, "Clip", {"min": -0.5}, False, np.float64, "depthwise"),
    (3, 16, 7, 16, 5, 1, 16, "Clip", {"max": 0.25}, False, np.float32, "depthwise"),
    (1, 48, 16, 48, 3, 1, 48, "Clip", CLIP6, False, np.float32, "depthwise"),  # planes
    (2, 8, 9, 8, 3, 2, 8, "Relu", None, False, np.float32, "depthwise"),  # planes
    (1, 4, 6, 8, 3, 1, 4, "Clip", CLIP6, False, np.float32, "depthwise"),  # multiplier 2
    (1, 24, 3, 24, 3, 1, 24, "", None, False, np.float32, "depthwise"),
    (1, 80, 2, 160, 1, 1, 1, "Clip", CLIP6, False, np.float32, "pointwise"),  # pointwise
    (2, 8, 8, 48, 1, 1, 1, "Relu", None, False, np.float64, "pointwise"),
    (1, 3, 12, 8, 3, 2, 1, "Clip", CLIP6, False, np.float32, "dense"),  # stride 2
    (1, 4, 6, 6, 3, 1, 1, "Clip", {"min": 1.0, "max": -1.0}, False, np.float32, "small"),
    (1, 16, 4, 16, 3, 1, 16, "Clip", CLIP6, True, np.float32, "epilogue"),  # residual
    (1, 16, 4, 16, 1, 1, 1, "Relu", None, True, np.float32, "pointwise"),
    (1, 8, 6, 8, 3, 1, 1, "Relu", None, True, np.float32, "small"),  # small loop, residual
    (2, 3, 7, 5, 3, 1, 1, "Clip", CLIP6, False, np.float64, "small"),
    (1, 6, 5, 4, 3, 1, 1, "", None, True, np.float32, "small"),  # residual only
    (1, 32, 8, 32, 3, 1, 1, "Relu", None, True, np.float32, "dense"),  # im2col, residual
    (2, 16, 9, 24, 3, 2, 1, "Relu", None, True, np.float64, "dense"),  # stride 2, batch 2
    (1, 64, 4, 64, 3, 1, 1, "Clip", CLIP6, False, np.float32, "dense"),  # dot products
    (2, 32, 6, 64, 3, 2, 1, "Relu", None, True, np.float64, "dense"),  # (float64, batch 2)
    (3, 16, 8, 32, 5, 1, 1, "", None, True, np.float32, "dense"),  # residual only
    (1, 16, 4, 16, 3, 1, 16, "LeakyRelu", None, False, np.float32, None),  # not bounds
    (1, 16, 4, 16, 3, 1, 16, "Clip", {"min": float("nan")}, False, np.float32, None),
    (1, 8, 4, 16, 1, 1, 1, "", None, False, np.float32, "pointwise"),  # the bias pass only
]


@needs_numba
@pytest.mark.parametrize("config", CONFIGS, ids=[f"{c[7] or 'none'}-{i}"
                                                 for i, c in enumerate(CONFIGS)])
def test_fused_conv_matches_reference_and_plain_numpy(config):
    n, c, size, m, k, stride, group, activation, bounds, residual, dtype, path = config
    rng = np.random.default_rng(sum(config[:7]))
    x = (rng.standard_normal((n, c, size, size)) * 3).astype(dtype)
    w = rng.standard_normal((m, c // group, k, k)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    attrs = _fused_attrs(activation, bounds, group=group, kernel_shape=[k, k],
                         strides=[stride, stride], pads=[k // 2] * 4)
    out = (size + 2 * (k // 2) - k) // stride + 1
    shape = (n, m, out, out)
    z = rng.standard_normal(shape).astype(dtype) if residual else None
    inputs = [x, w, b] + ([z] if residual else [])
    got, taken = _compiled(inputs, shape, dtype, attrs)
    assert taken == path
    want = _reference(x, w, b, z, attrs, activation, bounds or {})
    scale = float(np.abs(want[np.isfinite(want)]).max(initial=0))
    np.testing.assert_allclose(got, want, **_tol(dtype, scale))
    plain = _plain_numpy(inputs, shape, dtype, attrs)
    np.testing.assert_allclose(got, plain, **_tol(dtype, scale))
    if activation in ("Relu", "Clip") and not residual:
        assert np.isnan(got).sum() == np.isnan(want).sum()


@needs_numba
def test_fused_conv_without_bias_and_with_nan_inputs():
    """An absent bias is zero; a NaN in X stays NaN through the bounds, as np.clip keeps it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 3, 3)).astype(np.float32)
    x[0, 5, 1, 1] = np.nan
    w = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    attrs = _fused_attrs("Clip", CLIP6, group=32, kernel_shape=[3, 3], pads=[1] * 4)
    got, taken = _compiled([x, w], (1, 32, 3, 3), np.float32, attrs)
    assert taken == "depthwise"
    want = _reference(x, w, None, None, attrs, "Clip", CLIP6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[0, 5]).all() and not np.isnan(got[0, 4]).any()


@needs_numba
@pytest.mark.parametrize("seed", range(16))
def test_depthwise_fused_conv_at_stride_2_runs_parity_planes(seed):
    """Stride 2, dilation 1: ``conv_wide_stride2`` (rows split by parity, one stride-2 run per
    kernel offset) on random kernels (odd and even), pads (asymmetric, or auto_pad), channel
    multipliers, odd and even sizes and bounds, against the float64 reference and the plain
    NumPy tier."""
    from backends.numpy.jit import depthwise
    rng = np.random.default_rng(900 + seed)
    # few channels on any plane, or as many as the channel-inner loop takes on planes of
    # 9x9 outputs and more
    many = seed % 3 == 0
    c = int(rng.integers(16, 40) if many else rng.integers(2, depthwise.CHANNELS_MIN))
    multiplier = int(rng.integers(1, 3))
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    conv = dict(group=c, strides=[2, 2], kernel_shape=kernel,
                pads=[int(rng.integers(0, k)) for k in kernel * 2])
    if seed % 4 == 3:
        conv = dict(group=c, strides=[2, 2], kernel_shape=kernel,
                    auto_pad=["SAME_UPPER", "SAME_LOWER", "VALID"][seed % 3])
    bounds = {"min": float(rng.uniform(-2, 0)), "max": float(rng.uniform(0, 2))}
    attrs = _fused_attrs("Clip", bounds, **conv)
    dtype = (np.float32, np.float64)[seed % 2]
    size = [int(rng.integers(k + (16 if many else 0), k + 24)) for k in kernel]
    x = (rng.standard_normal((int(rng.integers(1, 3)), c, *size)) * 2).astype(dtype)
    w = rng.standard_normal((c * multiplier, 1, *kernel)).astype(dtype)
    b = rng.standard_normal(c * multiplier).astype(dtype)
    geom = window_geometry(x.shape[2:], w.shape[2:], _attrs("Conv", **conv))
    shape = (x.shape[0], w.shape[0]) + geom.out
    planned = jit._load("portable.FusedConv").compiled_prepare(
        array_types([x, w, b]), array_types([np.empty(shape, dtype)]), attrs)
    assert planned[0] == "depthwise" and planned[1][0] is depthwise.conv_wide_stride2
    got, _ = _compiled([x, w, b], shape, dtype, attrs)
    want = _reference(x, w, b, None, attrs, "Clip", bounds)
    np.testing.assert_allclose(got, want, **_tol(dtype, 8.0))
    np.testing.assert_allclose(got, _plain_numpy([x, w, b], shape, dtype, attrs),
                               **_tol(dtype, 8.0))


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("residual", [False, True])
def test_pointwise_fused_conv_keeps_its_views_only_for_the_same_arrays(dtype, residual):
    """The 1x1 path keeps flat views of the arrays it was handed: run again on the same
    arrays (new values in them), on new arrays, and on a strided view (the composed kernel
    then runs), each against the float64 reference."""
    rng = np.random.default_rng(11)
    attrs = _fused_attrs("Clip", {"min": -0.5, "max": 1.5}, kernel_shape=[1, 1])
    shape = (2, 24, 3, 5)
    x = rng.standard_normal((2, 40, 3, 5)).astype(dtype)
    w, b = rng.standard_normal((24, 40, 1, 1)).astype(dtype), rng.standard_normal(24).astype(dtype)
    z = rng.standard_normal(shape).astype(dtype) if residual else None
    inputs = [x, w, b] + ([z] if residual else [])
    types, y = array_types(inputs), np.full(shape, np.nan, dtype)
    assert jit._load("portable.FusedConv").compiled_prepare(types, array_types([y]),
                                                            attrs)[0] == "pointwise"
    bound = bound_kernel(jit.kernels["portable.FusedConv"], pt.cpu().backend, types,
                         array_types([y]), attrs)
    wide = rng.standard_normal((2, 40, 3, 10)).astype(dtype)
    for run in range(4):
        if run == 1:
            x[...] = rng.standard_normal(x.shape)  # the same array, new values
        elif run == 2:
            inputs[0] = x = rng.standard_normal(x.shape).astype(dtype)  # another array
        elif run == 3:
            inputs[0] = x = wide[..., ::2]  # not contiguous: the composed kernel's turn
        y[...] = np.nan
        bound(_ctx(), inputs, [y], attrs)
        want = _reference(x, w, b, z, attrs, "Clip", {"min": -0.5, "max": 1.5})
        np.testing.assert_allclose(y, want, **_tol(dtype, 8.0))


@needs_numba
@pytest.mark.parametrize("seed", range(8))
def test_pointwise_fused_conv_on_a_few_positions_reads_w_transposed(seed):
    """1x1 Convs on planes of at most ``pointwise.POSITIONS`` positions with a read-only
    weight run ``pointwise_transposed`` on W^T, kept while the same weight comes again and
    remade for another; a writeable weight runs sgemm. Random channels, batch, residual,
    bounds and dtype, against the float64 reference and the plain NumPy tier."""
    from backends.numpy.jit import pointwise
    rng = np.random.default_rng(500 + seed)
    dtype = (np.float32, np.float64)[seed % 2]
    residual = seed % 3 == 1
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 90))
    m = int(rng.integers(pointwise.CHANNELS, 300))
    plane = [(1, 1), (1, 3), (2, 2), (1, 4), (3, 1)][seed % 5]
    bounds = {"min": float(rng.uniform(-3, 0)), "max": float(rng.uniform(0, 3))}
    attrs = _fused_attrs("Clip", bounds, kernel_shape=[1, 1])
    shape = (n, m) + plane
    x = rng.standard_normal((n, c) + plane).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    z = rng.standard_normal(shape).astype(dtype) if residual else None
    weights = [rng.standard_normal((m, c, 1, 1)).astype(dtype) for _ in range(3)]
    for w in weights[:2]:
        w.setflags(write=False)  # (a graph's initializers are frozen so)
    types = array_types([x, weights[0], b] + ([z] if residual else []))
    y = np.full(shape, np.nan, dtype)
    fused = jit._load("portable.FusedConv")
    kind, state = fused.compiled_prepare(types, array_types([y]), attrs)
    assert kind == "pointwise" and state[6] is not None
    call = fused.bind(pt.cpu().backend, types, array_types([y]), attrs)
    transposed = call.args[0][6]
    for w, taken in zip(weights + weights[:1], [True, True, False, True]):
        inputs = [x, w, b] + ([z] if residual else [])
        y[...] = np.nan
        call(_ctx(), inputs, [y], attrs)
        assert (transposed.source is w) == taken
        want = _reference(x, w, b, z, attrs, "Clip", bounds)
        np.testing.assert_allclose(y, want, **_tol(dtype, 16.0))
        np.testing.assert_allclose(y, _plain_numpy(inputs, shape, dtype, attrs),
                                   **_tol(dtype, 16.0))


@needs_numba
def test_cpu_table_uses_the_compiled_fused_conv():
    """(The small-model suite's plans, checked against onnxruntime in
    tests/io/test_torch_small_models.py, then run it.)"""
    assert pt.cpu().backend.kernel("portable.FusedConv") is jit.kernels["portable.FusedConv"]


# -- short reductions -------------------------------------------------------------------------


def _reduce(op, x, axes, keepdims):
    attrs = _attrs(op, keepdims=int(keepdims))
    want_shape = np.sum(x, axis=axes, keepdims=keepdims).shape
    out = np.full(want_shape, -7, x.dtype)
    xp_kernels[op](_ctx(), [x, np.array(axes, np.int64)], [out], attrs)
    return out


@pytest.mark.parametrize("shape,axes", [((1, 1280, 2, 2), (2, 3)), ((8, 128, 4, 4), (2, 3)),
                                        ((3, 5, 7), (2,)), ((2, 64, 8, 8), (2, 3)),
                                        ((4, 6, 9, 9), (2, 3)), ((2, 3, 4), (0, 2)),
                                        ((5, 2, 3), (1, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_mean_and_sum_match_numpy(shape, axes, dtype, keepdims):
    rng = np.random.default_rng(len(shape) + sum(axes))
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    count = int(np.prod([shape[a] for a in axes]))
    trailing = axes == tuple(range(len(shape) - len(axes), len(shape)))
    out = np.empty(np.sum(x, axis=axes).shape, dtype)
    taken = short_trailing_sum(np, x, axes, out)
    assert bool(taken) == (trailing and count <= SHORT_REDUCTION and dtype != np.int32)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-10)
    want_sum = np.sum(x.astype(np.float64), axis=axes, keepdims=keepdims)
    got = _reduce("ReduceSum", x, axes, keepdims)
    np.testing.assert_allclose(got, want_sum.astype(dtype), **tol)
    got = _reduce("ReduceMean", x, axes, keepdims)
    want = np.mean(x, axis=axes, keepdims=keepdims, dtype=dtype)  # ONNX: in x's dtype
    if dtype == np.int32:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **tol)
        np.testing.assert_allclose(got, want_sum / count, **tol)


@pytest.mark.parametrize("shape", [(1, 128, 4, 4), (2, 1280, 2, 2), (1, 3, 9, 9),
                                   (2, 4, 5), (1, 2, 3, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_average_pool_matches_numpy_mean(shape, dtype):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    y = np.full(shape[:2] + (1,) * (len(shape) - 2), -7, dtype)
    xp_kernels["GlobalAveragePool"](_ctx(), [x], [y], {})
    want = x.astype(np.float64).mean(axis=tuple(range(2, len(shape))), keepdims=True)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y, want, **tol)


def test_short_sum_keeps_infinities_and_nan():
    x = np.ones((3, 4), np.float32)
    x[0, 1], x[1, 2], x[2, 0], x[2, 3] = np.inf, np.nan, np.inf, -np.inf
    out = np.empty(3, np.float32)
    with np.errstate(invalid="ignore"):  # (inf - inf, as np.sum warns of it too)
        assert short_trailing_sum(np, x, (1,), out) == 4
    np.testing.assert_array_equal(np.isinf(out), [True, False, False])
    np.testing.assert_array_equal(np.isnan(out), [False, True, True])
