"""The compiled small dense Conv loop (backends/numpy/jit/small_conv.py) and the FusedConv
steps that run it with their bias, residual and bounds inside (``conv_small_bounded``).

The loop sums in a fixed order: kernel offset by kernel offset in (channel, kernel row,
kernel column) order, each product added to the running sum and rounded on its own (no
reassociation). A NumPy reference that adds whole shifted planes in that order rounds every
element the same way, so the results are compared bit for bit: the plain Conv starting from
the bias, the fused one from zero and then adding the bias, Z and np.clip's bounds, as the
composed FusedConv kernel orders them. Other layouts and the choice against the stacked loop
are checked against a float64 reference."""
from __future__ import annotations

import json

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry
from portable.ops.conv import window_geometry

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _ordered_conv(x, w, start, pads, dilation):
    """Conv at stride 1 by NumPy, in the loop's order: ``start`` (per output channel) plus
    each kernel offset's weight times the shifted padded plane, channel, then kernel row,
    then kernel column; every addition rounded in x's dtype."""
    n, c, height, width = x.shape
    m, _, kh, kw = w.shape
    p = pads
    padded = np.zeros((n, c, height + 2 * p, width + 2 * p), x.dtype)
    padded[:, :, p:p + height, p:p + width] = x
    rows = height + 2 * p - dilation * (kh - 1)
    cols = width + 2 * p - dilation * (kw - 1)
    y = np.empty((n, m, rows, cols), x.dtype)
    y[...] = start[None, :, None, None]
    for k in range(c):
        for jh in range(kh):
            for jw in range(kw):
                r, q = jh * dilation, jw * dilation
                y += w[None, :, k, jh, jw, None, None] * padded[:, k:k + 1, r:r + rows,
                                                                q:q + cols]
    return y


CASES = [  # (N, C, size, M, kernel, pad, dilation): kernel offsets from 1 to 75, 4 and not
    (1, 1, 28, 6, 5, 2, 1),  # LeNet's first Conv
    (2, 3, 9, 5, 3, 1, 1),
    (1, 4, 8, 7, 3, 2, 2),
    (1, 2, 6, 3, 2, 1, 1),
    (3, 5, 5, 4, 1, 1, 1),
    (1, 3, 7, 2, 5, 2, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_loops_sum_in_their_stated_order(case, dtype):
    from backends.numpy.jit import small_conv

    n, c, size, m, k, pad, dilation = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, size, size)).astype(dtype)
    w = rng.standard_normal((m, c, k, k)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    g = (k, k, dilation, dilation, pad, pad)
    plain = _ordered_conv(x, w, b, pad, dilation)
    y = np.full(plain.shape, np.nan, dtype)
    small_conv.conv_small(x, w, b, y, g)
    assert y.tobytes() == plain.tobytes()

    sums = _ordered_conv(x, w, np.zeros(m, dtype), pad, dilation)
    z = rng.standard_normal(plain.shape).astype(dtype)
    low, high = dtype(-0.5), dtype(0.75)
    for residual in (None, z):
        want = sums + b[None, :, None, None]
        if residual is not None:
            want = want + residual
        want = np.minimum(np.maximum(want, low), high)  # (np.clip's rule)
        y[...] = np.nan
        small_conv.conv_small_bounded(x, w, b, residual, y, g, low, high)
        assert y.tobytes() == want.tobytes()


def _fused_attrs(activation, bounds=None, **conv):
    given = dict(activation=activation, activation_attrs=json.dumps(bounds or {}), **conv)
    return {key: given.get(key, spec.default)
            for key, spec in registry.get("portable.FusedConv").attrs.items()}


def _reference(x, w, b, z, attrs, low, high):
    """float64: Conv by the xp kernel, plus Z, then np.clip."""
    from backends.xp.kernels import kernels as xp_kernels

    conv = {k: v for k, v in attrs.items() if k in registry.get("Conv").attrs}
    geom = window_geometry(x.shape[2:], w.shape[2:], conv)
    y = np.empty((x.shape[0], w.shape[0]) + geom.out)
    inputs = [x.astype(np.float64), w.astype(np.float64)]
    inputs += [] if b is None else [b.astype(np.float64)]
    xp_kernels["Conv"](_ctx(), inputs, [y], conv)
    return np.clip(y if z is None else y + z, low, high)


def _step(inputs, shape, dtype, attrs):
    """(the FusedConv step bound as a plan binds it, its kind)."""
    fused = jit._load("portable.FusedConv")
    types = array_types(inputs)
    out = array_types([np.empty(shape, dtype)])
    kind = fused.compiled_prepare(types, out, attrs)[0]
    return bound_kernel(jit.kernels["portable.FusedConv"], pt.cpu().backend, types, out,
                        attrs), kind


@pytest.mark.parametrize("biased", [True, False])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_small_step_on_any_layout(biased, residual, dtype):
    """The bound step of the small kind, with and without bias and Z, on contiguous arrays,
    then on strided views of X, Z and Y (the loop indexes the 4-D arrays as they are)."""
    rng = np.random.default_rng(7)
    attrs = _fused_attrs("Clip", {"min": -1.0, "max": 2.0}, kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1])
    x = rng.standard_normal((2, 3, 7, 7)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    w.setflags(write=False)
    b = rng.standard_normal(4).astype(dtype) if biased else None
    shape = (2, 4, 7, 7)
    z = rng.standard_normal(shape).astype(dtype) if residual else None
    inputs = [x, w] + ([b] if biased else ([None] if residual else [])) + (
        [z] if residual else [])
    step, kind = _step(inputs, shape, dtype, attrs)
    assert kind == "small"
    y = np.full(shape, np.nan, dtype)
    step(_ctx(), inputs, [y], attrs)
    want = _reference(x, w, b, z, attrs, -1.0, 2.0)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y, want, **tol)

    wide_x = np.zeros((2, 3, 7, 14), dtype)
    wide_x[..., ::2] = x
    wide_y = np.full((2, 4, 7, 14), np.nan, dtype)
    strided = [wide_x[..., ::2], w] + inputs[2:]
    if residual:
        wide_z = np.zeros((2, 4, 7, 14), dtype)
        wide_z[..., ::2] = z
        strided[-1] = wide_z[..., ::2]
    step(_ctx(), strided, [wide_y[..., ::2]], attrs)
    np.testing.assert_allclose(wide_y[..., ::2], want, **tol)
    assert np.isnan(wide_y[..., 1::2]).all()  # (nothing written between the view's columns)


@pytest.mark.parametrize("config,kind", [
    ((1, 16, 4, 16, 3), "stacked"),  # K = 144: the stacked loop, though the small one takes it
    ((1, 32, 4, 32, 3), "stacked"),  # K = 288
    ((1, 6, 10, 6, 5), "stacked"),  # K = 150
    ((1, 8, 8, 8, 3), "small"),  # K = 72: below stacked_conv.STACK_K
    ((1, 1, 28, 6, 5), "small"),  # LeNet's first Conv
])
def test_padded_small_convs_with_long_runs_take_the_stacked_loop(config, kind):
    from backends.numpy.jit import small_conv
    from backends.numpy.jit.stacked_conv import STACK_K

    n, c, size, m, k = config
    rng = np.random.default_rng(sum(config))
    attrs = _fused_attrs("Relu", kernel_shape=[k, k], pads=[k // 2] * 4)
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    w.setflags(write=False)
    b = rng.standard_normal(m).astype(np.float32)
    shape = (n, m, size, size)
    conv = {key: v for key, v in attrs.items() if key in registry.get("Conv").attrs}
    types, out = array_types([x, w, b]), array_types([np.empty(shape, np.float32)])
    assert small_conv.prepare_small(types, out, conv) is not None  # (both loops take it)
    assert (c * k * k >= STACK_K) == (kind == "stacked")
    planned = jit._load("portable.FusedConv").compiled_prepare(types, out, attrs)
    if kind == "stacked":
        assert planned[0] == "dense" and planned[1][0].layout == "stacked"
    else:
        assert planned[0] == "small"
    step, _ = _step([x, w, b], shape, np.float32, attrs)
    y = np.full(shape, np.nan, np.float32)
    step(_ctx(), [x, w, b], [y], attrs)
    np.testing.assert_allclose(y, _reference(x, w, b, None, attrs, 0.0, np.inf),
                               rtol=1e-5, atol=1e-4)


def test_few_output_channels_take_the_loop_up_to_their_own_limit():
    """Up to ``FEW_CHANNELS`` output channels the loop runs up to ``FEW_CHANNELS_WORK``
    multiply-adds (LeNet's first Conv at batch 8), more channels only up to ``SMALL_WORK``."""
    from backends.numpy.jit import small_conv

    conv = {key: spec.default for key, spec in registry.get("Conv").attrs.items()}
    conv.update(kernel_shape=(5, 5), pads=(2, 2, 2, 2))

    def taken(n, m):
        types = array_types([np.empty((n, 1, 28, 28), np.float32),
                             np.empty((m, 1, 5, 5), np.float32)])
        out = array_types([np.empty((n, m, 28, 28), np.float32)])
        return small_conv.prepare_small(types, out, conv) is not None

    work = 8 * 6 * 25 * 28 * 32
    assert small_conv.SMALL_WORK < work <= small_conv.FEW_CHANNELS_WORK
    assert taken(8, 6) and taken(1, small_conv.FEW_CHANNELS)
    assert 2 * small_conv.FEW_CHANNELS * 25 * 28 * 32 > small_conv.SMALL_WORK
    assert not taken(1, 2 * small_conv.FEW_CHANNELS)  # (work past SMALL_WORK)
    assert not taken(64, 6)  # (past FEW_CHANNELS_WORK)
