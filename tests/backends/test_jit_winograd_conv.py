"""The compiled Winograd F(4x4, 3x3) (backends/numpy/jit/winograd_conv.py): against a float64
direct convolution (edges cropped from partial tiles, channel counts off the 16-lane blocks,
output channels in several passes, batches), within the float32 error F(4,3) is known for;
which Convs the dense plan gives it; and a FusedConv's bias, residual and Relu after it."""
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
# F(4,3) on the points 0, +-1, 1/2, -2 in float32: 1e-6 to 5e-6 of the output's largest value
# on these shapes (Lavin and Gray's points give about twice that); direct sums stay near 1e-7.
BOUND = 2e-5


def _attrs(op, **given):
    return {key: given.get(key, spec.default) for key, spec in registry.get(op).attrs.items()}


def _direct(x, w):
    """The 3x3 correlation with one pixel of zero padding, in float64."""
    n, c, h, wd = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd))
    for a in range(3):
        for b in range(3):
            y += np.einsum("mc,nchw->nmhw", w[:, :, a, b].astype(np.float64),
                           padded[:, :, a:a + h, b:b + wd])
    return y


def _error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _plan(x, w):
    """The dense plan of a 3x3 Conv, on Winograd wherever it applies (the flat products
    are the plan's choice on some of these shapes: ``dense_conv.WINOGRAD_OVER_FLAT``)."""
    from backends.numpy.jit import dense_conv, winograd_conv
    from backends.xp.kernels.fused import conv_workspace

    attrs = _attrs("Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    out = (x.shape[0], w.shape[0]) + x.shape[2:]
    types = array_types([x, w]), array_types([np.empty(out, x.dtype)])
    plan = dense_conv.DensePlan(*types, attrs)
    workspace = conv_workspace(*types, attrs)
    if plan.layout == "flat" and winograd_conv.applies(x.shape, w.shape, plan.g, x.dtype,
                                                       workspace):
        plan.layout = "winograd"
        plan.winograd = winograd_conv.WinogradPlan(x.shape, w.shape, workspace)
    return plan, attrs


@pytest.mark.parametrize("shape", [
    (1, 32, 28, 28, 16),  # whole tiles
    (1, 37, 29, 30, 5),  # partial tiles on both axes, 37 channels: two blocks and 5 lanes
    (2, 48, 26, 27, 33),  # a batch
    (1, 64, 56, 56, 64),
    (1, 33, 31, 28, 1),
    (11, 32, 10, 10, 20),  # 9 tiles an image: passes of 8 images and of 3
    (70, 32, 4, 3, 17),  # one tile an image, cropped: passes of 64 images and of 6
])
def test_winograd_matches_the_direct_convolution(shape):
    n, c, h, wd, m = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    plan, _ = _plan(x, w)
    assert plan.layout == "winograd"
    ctx = KernelContext(xp=np, rng=rng, backend=pt.cpu().backend)
    y = np.full((n, m, h, wd), np.nan, np.float32)
    plan.conv(ctx, x, w, y)
    assert _error(y, _direct(x, w)) < BOUND


def test_output_channels_in_several_passes():
    """Scratch for only part of the output channels: passes of ``chunk`` channels, the weight
    transformed per pass; the answer as in one pass."""
    from backends.numpy.jit import winograd_conv

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 40, 28, 28)).astype(np.float32)
    w = rng.standard_normal((50, 40, 3, 3)).astype(np.float32)
    padded, v = (np.empty(s, np.float32) for s in winograd_conv._fixed(x.shape))
    want = _direct(x, w)
    for count in (50, 16):  # (all at once, then 16 + 16 + 16 + 2)
        u = np.empty((count, 36, 40), np.float32)
        prod = np.empty(count * 36 * v.shape[1], np.float32)
        y = np.full(want.shape, np.nan, np.float32)
        winograd_conv.conv_winograd(x, w, y, padded, v, u, prod, padded.shape[1] // 4)
        assert _error(y, want) < BOUND
    fixed = padded.size + v.size
    per_channel = 36 * (40 + v.shape[1])
    for room, count in ((50, 50), (49, 48), (20, 16), (15, 0)):  # (channels' room -> chunk)
        columns = (fixed + room * per_channel) * 4
        assert winograd_conv.chunk(x.shape, w.shape, columns) == count


@pytest.mark.parametrize("case", [
    dict(dtype=np.float64),  # (float64 keeps the stacked loop)
    dict(size=12),  # 9 tiles an image
    dict(channels=16),
    dict(strides=[2, 2]),
    dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(pads=[0, 0, 0, 0]),
    dict(kernel=5, pads=[2, 2, 2, 2]),
    dict(env="0"),
])
def test_other_convs_do_not_take_winograd(case, monkeypatch):
    from backends.numpy.jit import dense_conv

    if "env" in case:
        monkeypatch.setenv("PORTABLE_WINOGRAD", case["env"])
    size, c, k = case.get("size", 28), case.get("channels", 64), case.get("kernel", 3)
    dtype = case.get("dtype", np.float32)
    conv = dict(kernel_shape=[k, k], strides=case.get("strides", [1, 1]),
                dilations=case.get("dilations", [1, 1]), pads=case.get("pads", [1, 1, 1, 1]))
    attrs = _attrs("Conv", **conv)
    x = np.empty((1, c, size, size), dtype)
    w = np.empty((32, c, k, k), dtype)
    geom = window_geometry(x.shape[2:], (k, k), attrs)
    out = np.empty((1, 32) + tuple(geom.out), dtype)
    plan = dense_conv.DensePlan(array_types([x, w]), array_types([out]), attrs)
    assert plan.layout != "winograd"


def test_a_fused_conv_adds_bias_residual_and_relu_after_winograd():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    w.setflags(write=False)  # (a plan's weight)
    b = rng.standard_normal(64).astype(np.float32)
    z = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    attrs = _attrs("portable.FusedConv", activation="Relu", activation_attrs=json.dumps({}),
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    types = array_types([x, w, b, z])
    out = array_types([np.empty(z.shape, np.float32)])
    planned = jit._load("portable.FusedConv").compiled_prepare(types, out, attrs)
    assert planned[0] == "dense" and planned[1][0].layout == "winograd"
    backend = pt.cpu().backend
    ctx = KernelContext(xp=np, rng=rng, backend=backend)
    y = np.full(z.shape, np.nan, np.float32)
    for _ in range(2):  # (the second run reuses the views cut from the workspace)
        bound_kernel(jit.kernels["portable.FusedConv"], backend, types, out, attrs)(
            ctx, [x, w, b, z], [y], attrs)
        want = np.maximum(_direct(x, w) + b[:, None, None] + z, 0)
        assert _error(y, want) < BOUND


def test_conv_transpose_at_stride_one_runs_winograd_on_the_flipped_weights():
    """dX of a 3x3 stride-1 Conv (a ConvTranspose of dY) is the Conv of dY with W flipped and
    transposed: through Winograd, against float64 col2im (the adjoint, summed directly)."""
    from backends.numpy.jit import conv_grads

    rng = np.random.default_rng(11)
    dy = rng.standard_normal((2, 40, 28, 28)).astype(np.float32)
    w = rng.standard_normal((40, 24, 3, 3)).astype(np.float32)  # (M, C) of the forward Conv
    bias = rng.standard_normal(24).astype(np.float32)
    attrs = _attrs("ConvTranspose", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    dx = np.full((2, 24, 28, 28), np.nan, np.float32)
    types = array_types([dy, w, bias])
    state = conv_grads.conv_transpose.compiled_prepare(types, array_types([dx]), attrs)
    assert state[0] and state[1][-1] is not None  # (the dense loop, with a Winograd plan)
    ctx = KernelContext(xp=np, rng=rng, backend=pt.cpu().backend)
    assert conv_grads.conv_transpose.compiled_run(state, ctx, [dy, w, bias], [dx], attrs)
    padded = np.zeros((2, 24, 30, 30))
    for a in range(3):
        for b in range(3):
            padded[:, :, a:a + 28, b:b + 28] += np.einsum(
                "mc,nmhw->nchw", w[:, :, a, b].astype(np.float64), dy.astype(np.float64))
    want = padded[:, :, 1:29, 1:29] + bias[:, None, None]
    assert _error(dx, want) < BOUND


@pytest.mark.parametrize("shape", [
    (2, 40, 28, 28, 24),  # whole tiles
    (3, 37, 13, 11, 17),  # partial tiles on both axes, channels off the 16-lane blocks
    (20, 32, 10, 10, 1),  # 9 tiles an image: passes of 15 images and of 5; one channel
])
def test_conv_grad_weight_runs_winograd(shape):
    """dW of a 3x3 stride-1 Conv by F(3x3, 4x4), against the float64 sum over positions of
    dY times the shifted, padded X."""
    from backends.numpy.jit import conv_grads

    n, c, h, wd, m = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    dy = rng.standard_normal((n, m, h, wd)).astype(np.float32)
    attrs = _attrs("portable.ConvGradWeight", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    dw = np.full((m, c, 3, 3), np.nan, np.float32)
    kernel = conv_grads.conv_grad_weight
    state = kernel.compiled_prepare(array_types([x, dy]), array_types([dw]), attrs)
    assert state[0] and state[1][0] == "winograd"
    ctx = KernelContext(xp=np, rng=rng, backend=pt.cpu().backend)
    assert kernel.compiled_run(state, ctx, [x, dy], [dw], attrs)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.empty(dw.shape)
    for a in range(3):
        for b in range(3):
            want[:, :, a, b] = np.einsum("nmhw,nchw->mc", dy.astype(np.float64),
                                         padded[:, :, a:a + h, b:b + wd])
    assert _error(dw, want) < BOUND


@pytest.mark.parametrize("case", [dict(dtype=np.float64), dict(channels=16), dict(env="0")])
def test_other_weight_gradients_do_not_take_winograd(case, monkeypatch):
    from backends.numpy.jit import conv_grads

    if "env" in case:
        monkeypatch.setenv("PORTABLE_WINOGRAD", case["env"])
    dtype, c = case.get("dtype", np.float32), case.get("channels", 40)
    x, dy = np.empty((2, c, 28, 28), dtype), np.empty((2, 24, 28, 28), dtype)
    attrs = _attrs("portable.ConvGradWeight", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    state = conv_grads.conv_grad_weight.compiled_prepare(
        array_types([x, dy]), array_types([np.empty((24, c, 3, 3), dtype)]), attrs)
    assert state is not None and state[1][0] != "winograd"
