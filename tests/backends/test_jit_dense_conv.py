"""The compiled dense Conv (backends/numpy/jit/dense_conv.py ``DensePlan``, run by the
FusedConv of backends/numpy/jit/fused_conv.py): its padded copy and window copies against an
im2col written with np.pad and slicing, each layout, and the whole FusedConv path, with the
geometries it must handle (strides, dilations, asymmetric pads, windows that leave the
input's last rows unread), against a float64 Conv summed window by window."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backends.numpy import jit
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry
from portable.ops.conv import window_geometry
from backends.xp.kernels.im2col import mark_border

import portable as pt

needs_numba = pytest.mark.skipif(not jit.available(),
                                 reason="numba is not installed (pip install 'portable[jit]')")

# (N, C, H, W, M, kernel, strides, dilations, pads (top, left, bottom, right))
GEOMETRIES = [
    (1, 16, 8, 8, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 16, 9, 7, 24, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 8, 10, 12, 16, (3, 5), (1, 2), (2, 1), (0, 2, 3, 1)),
    (1, 32, 5, 5, 40, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),  # a downsample: no padding
    (1, 20, 6, 6, 64, (3, 3), (3, 3), (1, 1), (2, 0, 0, 2)),  # last rows never read
    (1, 12, 4, 4, 64, (5, 5), (1, 1), (1, 1), (4, 4, 4, 4)),  # windows all padding
]


def _im2col_reference(x, kernel, strides, dilations, pads, out):
    """cols (N, C * kh * kw, oh * ow) in float64 through np.pad and one slice per offset."""
    n, c = x.shape[:2]
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2] + 8),
                                           (pads[1], pads[3] + 8)))
    cols = np.empty((n, c, kernel[0], kernel[1], out[0], out[1]))
    for jh in range(kernel[0]):
        for jw in range(kernel[1]):
            top, left = jh * dilations[0], jw * dilations[1]
            cols[:, :, jh, jw] = padded[:, :, top:top + out[0] * strides[0]:strides[0],
                                        left:left + out[1] * strides[1]:strides[1]]
    return cols.reshape(n, c * kernel[0] * kernel[1], out[0] * out[1])


def _attrs(op, **given):
    return {k: given.get(k, spec.default) for k, spec in registry.get(op).attrs.items()}


def _geometry(config):
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs = _attrs("Conv", kernel_shape=list(kernel), strides=list(strides),
                   dilations=list(dilations), pads=list(pads))
    return attrs, window_geometry((h, w), kernel, attrs)


def _conv_arrays(config, seed):
    """(attrs, geometry, X, W, Y full of NaN) of a float32 Conv of ``config``."""
    n, c, h, w, m, kernel = config[:6]
    attrs, geom = _geometry(config)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c) + kernel).astype(np.float32)
    return attrs, geom, x, wt, np.full((n, m) + tuple(geom.out), np.nan, np.float32)


@needs_numba
@pytest.mark.parametrize("config", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_loops_match_padded_slices(config, dtype):
    """Both compiled window copies (columns, pixel rows) from the compiled padded copy equal
    the reference im2col exactly."""
    from backends.numpy.jit import dense_conv
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs, geom = _geometry(config)
    x = np.random.default_rng(c).standard_normal((n, c, h, w)).astype(dtype)
    plan = dense_conv.DensePlan(array_types([x, np.empty((m, c) + kernel, dtype)]),
                                array_types([np.empty((n, m) + tuple(geom.out), dtype)]), attrs)
    want = _im2col_reference(x, kernel, strides, dilations, pads, geom.out).astype(dtype)
    padded = np.full(plan.padded, 7, dtype)
    dense_conv.pad_into(x, padded, plan.head[0], plan.head[1], True)
    cols = np.full(want.shape, 7, dtype)
    dense_conv.columns_from_padded(padded, cols, plan.g)
    np.testing.assert_array_equal(cols, want)
    rows = np.full((n, want.shape[2], want.shape[1]), 7, dtype)
    dense_conv.rows_from_padded(padded, rows, plan.g)
    np.testing.assert_array_equal(rows, want.transpose(0, 2, 1))


@needs_numba
@pytest.mark.parametrize("config", GEOMETRIES)
@pytest.mark.parametrize("layout", ["columns", "rows", "bands"])
def test_dense_plan_layouts_match_float64(config, layout):
    """Every layout of the dense plan, forced on each geometry, three times through one
    workspace (run 2 reuses run 1's views and padded border, run 3 finds the border
    overwritten), against a float64 Conv."""
    from backends.numpy.jit import dense_conv
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs, geom, x, wt, y = _conv_arrays(config, seed=m)
    assert dense_conv.DensePlan.applies(array_types([x, wt]), array_types([y]), attrs)
    plan = dense_conv.DensePlan(array_types([x, wt]), array_types([y]), attrs)
    if plan.layout != "pointwise":
        plan.layout = layout
        plan.band_rows = 2  # (bands of two output rows: several, the last one shorter)
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
    # A plan's workspace: buffers handed in, so the views into them are kept after run 1.
    ctx.workspace.update(columns=np.empty(1 << 20, np.uint8), padded=np.empty(1 << 20, np.uint8))
    for run in range(3):
        if run == 2:  # another layout's padding went through the buffer: borders are stale
            ctx.workspace["padded"].fill(0xFF)
            mark_border(ctx.workspace["padded"], None)
        x = x[:, ::-1].copy()  # (another input through the same buffers)
        cols = _im2col_reference(x, kernel, strides, dilations, pads, geom.out)
        want = np.einsum("mk,nkp->nmp", wt.reshape(m, -1).astype(np.float64), cols)
        plan.conv(ctx, x, wt, y)
        np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.abs(want).max()))
    assert plan.layout in ("pointwise", "bands") or plan._kept is not None


STEMS = [  # RGB stems: window runs of 3 x 7 x 7, too short for the stacked loop's products
    (1, 3, 30, 30, 16, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # ResNet's, small
    (2, 3, 17, 19, 8, (7, 7), (2, 2), (1, 1), (3, 2, 3, 2)),
    (1, 3, 20, 20, 8, (9, 9), (1, 1), (1, 1), (4, 4, 4, 4)),
]


@needs_numba
@pytest.mark.parametrize("config", STEMS)
def test_rgb_stems_take_bands_of_columns(config):
    """A Conv of 3 input channels that the stacked loop would take runs as bands of im2col
    columns, each band's product written into its rows of Y: every band's columns equal the
    reference im2col's, and the Conv a float64 one."""
    from backends.numpy.jit import dense_conv
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs, geom, x, wt, y = _conv_arrays(config, seed=h)
    plan = dense_conv.DensePlan(array_types([x, wt]), array_types([y]), attrs)
    assert plan.layout == "bands" and plan.band_rows >= 1
    want_cols = _im2col_reference(x, kernel, strides, dilations, pads, geom.out)
    padded = np.zeros(plan.padded, np.float32)
    dense_conv.pad_into(x, padded, plan.head[0], plan.head[1], True)
    out_w = geom.out[1]
    for top in range(0, geom.out[0], 3):
        count = min(3, geom.out[0] - top)
        band = np.full((want_cols.shape[1], count * out_w), 7, np.float32)
        dense_conv.columns_band(padded, band, plan.g, n - 1, top)
        np.testing.assert_array_equal(
            band, want_cols[n - 1][:, top * out_w:(top + count) * out_w])
    plan.band_rows = 2
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
    plan.conv(ctx, x, wt, y)
    want = np.einsum("mk,nkp->nmp", wt.reshape(m, -1).astype(np.float64), want_cols)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())


def _conv_reference(x, w, b, z, kernel, strides, dilations, pads, out):
    """Conv + bias + Z, then Relu, in float64, summed over kernel offsets."""
    cols = _im2col_reference(x, kernel, strides, dilations, pads, out)
    y = np.einsum("mk,nkp->nmp", w.reshape(w.shape[0], -1).astype(np.float64), cols)
    y = y.reshape((x.shape[0], w.shape[0]) + tuple(out)) + b.astype(np.float64)[:, None, None]
    return np.maximum(y + z, 0)


@needs_numba
@pytest.mark.parametrize("config", GEOMETRIES)
def test_dense_fused_conv_with_residual_matches_float64(config):
    n, c, h, wd, m, kernel, strides, dilations, pads = config
    conv = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations),
                pads=list(pads))
    attrs = _attrs("portable.FusedConv", activation="Relu", activation_attrs=json.dumps({}),
                   **conv)
    geom = window_geometry((h, wd), kernel, _attrs("Conv", **conv))
    rng = np.random.default_rng(n + c + m)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c) + kernel).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    shape = (n, m) + tuple(geom.out)
    z = rng.standard_normal(shape).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)
    types, out_types = array_types([x, w, b, z]), array_types([y])
    fused = jit._load("portable.FusedConv")
    assert fused.compiled_prepare(types, out_types, attrs)[0] == "dense"
    backend = pt.cpu().backend
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=backend)
    bound_kernel(jit.kernels["portable.FusedConv"], backend, types, out_types, attrs)(
        ctx, [x, w, b, z], [y], attrs)
    want = _conv_reference(x, w, b, z, kernel, strides, dilations, pads, geom.out)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


@needs_numba
def test_a_fused_conv_given_every_blas_thread_runs_sgemm_while_the_run_allows_several(
        monkeypatch):
    """The stacked loop runs one thread: a FusedConv step that earns every allowed BLAS thread
    runs the composed kernel (the xp Conv's sgemm on them, then the epilogue: the xp answer,
    bit for bit) while BLAS runs several, and the loop at one thread."""
    from backends.numpy import threads
    from backends.numpy.jit import dense_conv
    from backends.xp.kernels import kernels as xp_kernels

    # (the stacked loop; Winograd, whose products are sgemm on every BLAS thread, would take
    # this shape at any thread count)
    monkeypatch.setenv("PORTABLE_WINOGRAD", "0")
    conv = dict(kernel_shape=[3, 3], strides=[1, 1], dilations=[1, 1], pads=[1, 1, 1, 1])
    attrs = _attrs("portable.FusedConv", activation="Relu", activation_attrs=json.dumps({}),
                   **conv)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 256, 28, 28)).astype(np.float32)
    w = rng.standard_normal((256, 256, 3, 3)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    shape = (1, 256, 28, 28)
    types, out_types = array_types([x, w, b]), array_types([np.empty(shape, np.float32)])
    assert threads.step_threads("portable.FusedConv", types, out_types, attrs)
    assert dense_conv.DensePlan.stacks(types[:2], out_types, _attrs("Conv", **conv))
    backend = pt.cpu().backend
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=backend)
    step = bound_kernel(jit.kernels["portable.FusedConv"], backend, types, out_types, attrs)
    want = np.empty(shape, np.float32)  # (the xp Conv, bias included, then Relu)
    xp_kernels["Conv"](ctx, [x, w, b], [want], _attrs("Conv", **conv))
    np.maximum(want, 0, out=want)
    for count in (2, 1):
        monkeypatch.setattr(threads.blas_threads, "current", count)
        y = np.full(shape, np.nan, np.float32)
        step(ctx, [x, w, b], [y], attrs)
        if count > 1:
            np.testing.assert_array_equal(y, want)
        else:  # (the loop sums in another order)
            assert not np.array_equal(y, want)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)
