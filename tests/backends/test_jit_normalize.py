"""The compiled LayerNormalization and last-axis Softmax (backends/numpy/jit/normalize.py)
against float64 closed forms and the NumPy kernels: every axis, with and without a bias,
with any of the optional statistics outputs, float32 and float64; NaN and infinities give
what the NumPy kernel gives; configurations the loops do not take still run (the xp kernel)."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _attrs(op, **given):
    return {k: given.get(k, spec.default) for k, spec in registry.get(op).attrs.items()}


def _run(op, table, inputs, outputs, attrs):
    bound = bound_kernel(table, pt.cpu().backend, array_types(inputs), array_types(outputs),
                         attrs)
    bound(_ctx(), inputs, outputs, attrs)
    return outputs


def _both(op, inputs, out_shapes, attrs):
    """(compiled outputs, xp outputs, whether the compiled loop took it)."""
    from backends.numpy.jit import normalize

    dtype = inputs[0].dtype
    ours = _run(op, jit.kernels[op], inputs,
                [None if s is None else np.full(s, np.nan, dtype) for s in out_shapes], attrs)
    theirs = _run(op, xp_kernels[op], inputs,
                  [None if s is None else np.full(s, np.nan, dtype) for s in out_shapes], attrs)
    taken = normalize.kernels[op].compiled_prepare(
        array_types(inputs), array_types([o for o in ours if o is not None]), attrs)
    return ours, theirs, taken is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", [((16, 64), -1), ((1, 16, 64), 2), ((2, 3, 4, 5), 1),
                                        ((3, 7), 0), ((1, 5, 33), -1)])
@pytest.mark.parametrize("stats", ["none", "both", "mean only", "inv only"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_float64_and_the_numpy_kernel(dtype, shape, axis, stats, with_bias):
    rng = np.random.default_rng(len(shape) + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    norm_axis = axis % len(shape)
    inner = shape[norm_axis:]
    scale = rng.standard_normal(inner).astype(dtype)
    bias = rng.standard_normal(inner).astype(dtype)
    inputs = [x, scale] + ([bias] if with_bias else [])
    stat_shape = shape[:norm_axis] + (1,) * len(inner)
    out_shapes = [shape, stat_shape if stats in ("both", "mean only") else None,
                  stat_shape if stats in ("both", "inv only") else None]
    attrs = _attrs("LayerNormalization", axis=axis, epsilon=1e-5)
    ours, theirs, taken = _both("LayerNormalization", inputs, out_shapes, attrs)
    assert taken
    wide = x.astype(np.float64)
    axes = tuple(range(norm_axis, len(shape)))
    mean = wide.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((wide - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    want = (wide - mean) * inv * scale + (bias if with_bias else 0)
    tol = 3e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours[0], want, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=tol, atol=tol * 10)
    for got, expected in ((ours[1], mean), (ours[2], inv)):
        if got is not None:
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 4, 16, 16), (64, 10), (3, 1), (2, 3, 129)])
def test_softmax_matches_float64_and_the_numpy_kernel(dtype, shape):
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    attrs = _attrs("Softmax", axis=-1)
    ours, theirs, taken = _both("Softmax", [x], [shape], attrs)
    assert taken
    wide = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    want = wide / wide.sum(axis=-1, keepdims=True)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(ours[0], want, rtol=tol, atol=tol)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=tol, atol=tol)


def test_softmax_nan_and_infinities_as_the_numpy_kernel():
    x = np.array([[1.0, np.nan, 2.0], [np.nan, 1.0, 0.0], [np.inf, 1.0, 0.0],
                  [-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0], [3.0, 1.0, np.inf]],
                 np.float32)
    with np.errstate(invalid="ignore"):
        ours, theirs, taken = _both("Softmax", [x], [x.shape], _attrs("Softmax", axis=-1))
    assert taken
    np.testing.assert_array_equal(np.isnan(ours[0]), np.isnan(theirs[0]))
    finite = ~np.isnan(theirs[0])
    np.testing.assert_allclose(ours[0][finite], theirs[0][finite], rtol=1e-6)


def test_what_the_loops_do_not_take_still_runs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    # Softmax over a middle axis; LayerNormalization with float64 statistics of float32 data.
    ours, theirs, taken = _both("Softmax", [x], [x.shape], _attrs("Softmax", axis=1))
    assert not taken
    np.testing.assert_array_equal(ours[0], theirs[0])
    scale = np.ones(5, np.float32)
    attrs = _attrs("LayerNormalization", axis=-1, stash_type=11)
    ours, theirs, taken = _both("LayerNormalization", [x, scale], [x.shape, None, None], attrs)
    assert not taken
    np.testing.assert_array_equal(ours[0], theirs[0])
    # A strided view runs the xp kernel through the same table entry.
    view = rng.standard_normal((8, 10)).astype(np.float32)[:, ::2]
    out = np.empty((8, 5), np.float32)
    _run("Softmax", jit.kernels["Softmax"], [view], [out], _attrs("Softmax", axis=-1))
    want = np.exp(view - view.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, want / want.sum(axis=1, keepdims=True), rtol=1e-6)


def test_views_are_kept_only_for_a_plans_buffers():
    """A call whose arrays own their memory (an imperative call's) leaves no reference to
    them in the prepared kernel; calls on views into one buffer (a plan's arena) keep their
    views, and a call on other arrays of that shape still computes its own values."""
    import gc
    import weakref

    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    types = array_types([x])
    for op, extra in (("Softmax", []), ("LayerNormalization", [np.ones(9, np.float32)])):
        attrs = _attrs(op, axis=-1)
        bound = bound_kernel(jit.kernels[op], pt.cpu().backend, array_types([x] + extra),
                             types, attrs)
        source, own = x.copy(), np.empty_like(x)
        bound(_ctx(), [source] + extra, [own], attrs)
        refs = [weakref.ref(source), weakref.ref(own)]
        del source, own
        gc.collect()
        assert all(ref() is None for ref in refs), op
        arena = np.empty(2 * x.size, np.float32)
        view = arena[:x.size].reshape(x.shape)
        for source in (x, (x * 2).astype(np.float32)):
            bound(_ctx(), [source] + extra, [view], attrs)
            want = _run(op, xp_kernels[op], [source] + extra, [np.empty_like(x)], attrs)[0]
            np.testing.assert_allclose(view, want, rtol=2e-6, atol=2e-6)
