"""The compiled gradients of a dense 2-D Conv (backends/numpy/jit/conv_grads.py): ConvTranspose
at stride 1 as a stacked Conv of the flipped weights and ConvGradWeight as dot products of
shifted runs, each against a float64 direct loop and against the xp kernel, over random
strides, pads, dilations, batches and both float dtypes; dX and dW against central
differences; and the shapes the loops leave to the other kernels."""
from __future__ import annotations

import numpy as np
import pytest

from backends.numpy import jit
from backends.numpy.jit import conv_grads
from backends.numpy.jit.grad_weight_runs import phase_layout
from portable.backend import array_types
from portable.ops.conv import output_padding, window_geometry
from backends.xp.kernels import kernels as xp_kernels
from tests.backends.test_jit_kernels import _attrs, _both, _ctx, _run, _tol
from tests.ops.cases_conv import conv_grad_weight_reference, conv_transpose_reference

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba is not installed")

FLOATS = (np.float32, np.float64)


def _config(seed: int, stride_one: bool):
    """A random dense Conv (group 1): kernel 1-5 per axis, stride 1-3 (1 when
    ``stride_one``), dilation 1-2, pads below the kernel or auto_pad, batch 1-3; returns
    (x, w, dy, the gradient ops' explicit attributes, geometry)."""
    rng = np.random.default_rng(500 + seed)
    kernel = [int(k) for k in rng.integers(2, 6, 2)]
    dilations = [int(d) for d in rng.integers(1, 3, 2)]
    strides = [1, 1] if stride_one else [int(s) for s in rng.integers(1, 4, 2)]
    given = dict(strides=strides, dilations=dilations,
                 pads=[int(rng.integers(0, k)) for k in kernel * 2])
    if rng.random() < 0.2:
        given.update(pads=None, auto_pad=str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])))
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    size = [int(rng.integers(e + 2, e + 12)) for e in extent]
    dtype = FLOATS[seed % 2]
    c, m = int(rng.integers(3, 13)), int(rng.integers(8, 21))
    x = rng.standard_normal((int(rng.integers(1, 4)), c, *size)).astype(dtype)
    w = rng.standard_normal((m, c, *kernel)).astype(dtype)
    attrs = _attrs("Conv", **{k: v for k, v in given.items() if v is not None})
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    dy = rng.standard_normal((x.shape[0], m) + geom.out).astype(dtype)
    explicit = dict(strides=list(geom.strides), dilations=list(geom.dilations),
                    pads=list(geom.head) + list(geom.tail), group=1)
    return x, w, dy, explicit, geom


def _transpose_attrs(explicit, geom, x):
    return _attrs("ConvTranspose", **explicit,
                  output_padding=list(output_padding(geom, x.shape[2:])))


def _taken(op, inputs, output, attrs) -> bool:
    """Whether the dense loop (not the depthwise one, not the xp kernel) takes the call."""
    state = conv_grads.kernels[op].compiled_prepare(array_types(inputs), array_types([output]),
                                                    attrs)
    return state is not None and state[0]


@pytest.mark.parametrize("seed", range(40))
def test_conv_transpose_matches_direct_loop_and_xp(seed):
    """dX = ConvTranspose(dY, W) as the gradient rule emits it, at strides 1-3 (one stacked
    Conv per stride phase) against the float64 scatter loop and the xp kernel."""
    x, w, dy, explicit, geom = _config(seed, stride_one=seed % 2 == 0)
    attrs = _transpose_attrs(explicit, geom, x)
    taken = _taken("ConvTranspose", [dy, w], np.empty_like(x), attrs)
    run = w.shape[0] * w.shape[2] * w.shape[3] >= conv_grads.DX_RUN_MIN
    if seed % 2 == 0 and geom.dilations[1] == 1 and run and x.shape[1] >= conv_grads.DX_CHANNELS:
        assert taken  # (every stride-1 Conv with undilated kernel columns)
    if not taken:
        return
    ours, theirs = _both("ConvTranspose", [dy, w], [x.shape], [x.dtype], attrs)
    want = conv_transpose_reference([dy.astype(np.float64), w.astype(np.float64)], attrs)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


def test_phase_taps():
    """Stride 1: every tap, reversed, head pad extent - 1 - head; stride 2: the taps of each
    parity; a phase no tap reaches (1x1 at stride 2) is empty."""
    assert conv_grads.phase_taps(3, 1, 2, 1, 0) == ([2, 1, 0], 3, 2)
    assert conv_grads.phase_taps(3, 2, 1, 1, 0) == ([1], 0, 1)
    assert conv_grads.phase_taps(3, 2, 1, 1, 1) == ([2, 0], 0, 1)  # (dY[u], dY[u + 1])
    assert conv_grads.phase_taps(1, 2, 1, 0, 1) == ([], 0, 1)
    assert conv_grads.phase_taps(3, 1, 1, 3, 0) is None  # (the head pad past the kernel)


def test_conv_transpose_with_bias():
    rng = np.random.default_rng(1)
    dy = rng.standard_normal((2, 16, 6, 7))
    w, b = rng.standard_normal((16, 8, 3, 3)), rng.standard_normal(8)
    attrs = _attrs("ConvTranspose", pads=[1, 1, 1, 1])
    assert _taken("ConvTranspose", [dy, w, b], np.empty((2, 8, 6, 7)), attrs)
    ours, theirs = _both("ConvTranspose", [dy, w, b], [(2, 8, 6, 7)], [dy.dtype], attrs)
    want = conv_transpose_reference([dy, w, b], attrs)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(dy.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(dy.dtype))


@pytest.mark.parametrize("loop", ["image", "batch"])
@pytest.mark.parametrize("seed", range(30))
def test_conv_grad_weight_matches_direct_loop_and_xp(seed, loop, monkeypatch):
    """dW = ConvGradWeight(X, dY) over strides 1-3 and dilations 1-2, by each loop (the
    per-image runs over stride phases, the whole-batch runs over kernel rows; the plane-size
    rule set so that the loop takes every shape), against the float64 window loop and the
    xp kernel."""
    monkeypatch.setattr(conv_grads, "DW_POSITIONS", 1 if loop == "image" else 1 << 30)
    monkeypatch.setattr(conv_grads, "DW_MIN_POSITIONS", 1)
    x, w, dy, explicit, geom = _config(seed, stride_one=seed % 3 == 0)
    attrs = _attrs("portable.ConvGradWeight", **explicit, kernel_shape=list(geom.kernel))
    state = conv_grads.kernels["portable.ConvGradWeight"].compiled_prepare(
        array_types([x, dy]), array_types([w]), attrs)
    assert state[0] and state[1][0] == loop
    ours, theirs = _both("portable.ConvGradWeight", [x, dy], [w.shape], [x.dtype], attrs)
    want = conv_grad_weight_reference([x.astype(np.float64), dy.astype(np.float64)], attrs)[0]
    tol = dict(rtol=1e-4, atol=1e-4) if x.dtype == np.float32 else _tol(x.dtype)
    np.testing.assert_allclose(ours[0], want, **tol)
    np.testing.assert_allclose(ours[0], theirs[0], **tol)


def test_phase_layout_reads_every_tap_in_its_plane():
    """Each tap's run starts where the window's first row and column lie in its phase."""
    rows, wide, taps = phase_layout((3, 2), (2, 3), (2, 1), (4, 5))
    assert wide == 5 + 0 and rows == 4 + 2 + 1
    for jh in range(3):
        for jw in range(2):
            phase, start = taps[jh * 2 + jw]
            assert phase == ((jh * 2) % 2) * 3 + jw % 3
            assert start == (jh * 2 // 2) * wide + jw // 3


def test_gradients_match_finite_differences():
    """dX and dW of sum(Conv(X, W) * H) for a small float64 Conv, by central differences of
    the float64 direct loop: stride 1, and stride 2 with dilated rows."""
    rng = np.random.default_rng(7)
    for strides, dilations, pads in (([1, 1], [1, 1], [1, 2, 1, 0]),
                                     ([2, 1], [2, 1], [1, 0, 2, 1])):
        x, w = rng.standard_normal((2, 8, 10, 9)), rng.standard_normal((16, 8, 3, 3))
        attrs = _attrs("Conv", strides=strides, dilations=dilations, pads=pads)
        geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
        heads = rng.standard_normal((2, 16) + geom.out)
        explicit = dict(strides=strides, dilations=dilations,
                        pads=list(geom.head) + list(geom.tail), group=1)
        grads = [(w, _both("portable.ConvGradWeight", [x, heads], [w.shape], [w.dtype], _attrs(
            "portable.ConvGradWeight", **explicit, kernel_shape=[3, 3]))[0][0]),
                 (x, _both("ConvTranspose", [heads, w], [x.shape], [x.dtype],
                           _transpose_attrs(explicit, geom, x))[0][0])]

        def loss(x_, w_):
            return float((_conv_reference(x_, w_, geom) * heads).sum())

        for value, grad in grads:
            numeric = np.zeros_like(value)
            for i in np.ndindex(value.shape):
                keep = value[i]
                value[i] = keep + 1e-6
                up = loss(x, w)
                value[i] = keep - 1e-6
                numeric[i] = (up - loss(x, w)) / 2e-6
                value[i] = keep
            np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)


def _conv_reference(x, w, geom):
    """Conv(X, W) in float64: per kernel tap, the input elements its windows read (zero
    outside the image) times the tap's weights."""
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = geom.kernel, geom.strides, geom.dilations, geom.head
    rows, cols = (np.arange(o) * s for o, s in zip(geom.out, (sh, sw)))
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(geom.out))
    for jh in range(kh):
        for jw in range(kw):
            a, b = rows + jh * dh - ph, cols + jw * dw - pw
            inside = np.zeros(x.shape[:2] + (len(a), len(b)))
            ok_a, ok_b = (a >= 0) & (a < x.shape[2]), (b >= 0) & (b < x.shape[3])
            inside[:, :, ok_a[:, None] & ok_b[None, :]] = x[:, :, a[ok_a]][:, :, :, b[ok_b]] \
                .reshape(x.shape[:2] + (-1,))
            y += np.einsum("ncrq,mc->nmrq", inside, w[:, :, jh, jw])
    return y


def test_shapes_left_to_other_kernels():
    """Depthwise gradients keep the depthwise loops; a 1x1 dX, a dX with dilated kernel
    columns, one dX channel and dW with a single output position keep the xp kernels."""
    rng = np.random.default_rng(3)
    f32 = np.float32
    dy = rng.standard_normal((2, 64, 8, 8)).astype(f32)
    for w, dx_shape, given in (
            (rng.standard_normal((64, 32, 1, 1)).astype(f32), (2, 32, 8, 8), {}),
            (rng.standard_normal((64, 32, 3, 3)).astype(f32), (2, 32, 8, 8),
             dict(dilations=[1, 2], pads=[1, 2, 1, 2])),
            (rng.standard_normal((64, 1, 3, 3)).astype(f32), (2, 1, 8, 8),
             dict(pads=[1, 1, 1, 1]))):
        attrs = _attrs("ConvTranspose", **given)
        assert not _taken("ConvTranspose", [dy, w], np.empty(dx_shape, f32), attrs)
        ours = _run("ConvTranspose", jit.kernels["ConvTranspose"], [dy, w], [dx_shape], [f32],
                    attrs)
        theirs = _run("ConvTranspose", xp_kernels["ConvTranspose"], [dy, w], [dx_shape], [f32],
                      attrs)
        np.testing.assert_array_equal(ours[0], theirs[0])
    x = rng.standard_normal((2, 16, 3, 3)).astype(f32)
    dyw = rng.standard_normal((2, 8, 1, 1)).astype(f32)
    attrs = _attrs("portable.ConvGradWeight", kernel_shape=[3, 3])
    assert not _taken("portable.ConvGradWeight", [x, dyw], np.empty((8, 16, 3, 3), f32), attrs)
    depthwise = rng.standard_normal((2, 8, 6, 6)).astype(f32)
    attrs = _attrs("portable.ConvGradWeight", kernel_shape=[3, 3], group=8)
    state = conv_grads.kernels["portable.ConvGradWeight"].compiled_prepare(
        array_types([depthwise, depthwise[:, :, :4, :4].copy()]),
        array_types([np.empty((8, 1, 3, 3), f32)]), attrs)
    assert state is not None and not state[0]  # (the depthwise loop's)


@pytest.mark.parametrize("op", ["ConvTranspose", "portable.ConvGradWeight"])
def test_a_gradient_given_every_blas_thread_leaves_it_to_sgemm(op, monkeypatch):
    """A step large enough to get every allowed BLAS thread declines the one-thread loops
    while BLAS runs several (the depthwise / xp kernels then run it), and takes them at one."""
    from backends.numpy import threads

    # (the stacked loops; Winograd, whose products are sgemm on every BLAS thread, would take
    # this dX at any thread count)
    monkeypatch.setenv("PORTABLE_WINOGRAD", "0")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 64, 32, 32)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((4, 64, 32, 32)).astype(np.float32)
    explicit = dict(strides=[1, 1], dilations=[1, 1], pads=[1, 1, 1, 1], group=1)
    if op == "ConvTranspose":
        attrs = _attrs(op, **explicit, output_padding=[0, 0])
        inputs, output = [dy, w], np.empty(x.shape, np.float32)
    else:
        attrs = _attrs(op, **explicit, kernel_shape=[3, 3])
        inputs, output = [x, dy], np.empty(w.shape, np.float32)
    types, out = array_types(inputs), array_types([output])
    assert threads.step_threads(op, types, out, attrs)
    kernel = conv_grads.kernels[op]
    state = kernel.compiled_prepare(types, out, attrs)
    assert state is not None and state[0]  # (the dense loop's shape)
    ctx = _ctx()
    for count, taken in ((2, False), (1, True)):
        monkeypatch.setattr(threads.blas_threads, "current", count)
        assert kernel.compiled_run(state, ctx, inputs, [output], attrs) is taken, count


def test_dw_loop_leaves_small_planes_with_many_weights_to_sgemm():
    """The whole-batch loop takes small planes only while dW is small (LeNet's 50 x 20 x 5 x 5
    on 8x8); ResNet-18's 256 x 256 x 3 x 3 on 8x8 and 512 x 512 x 3 x 3 on 4x4 go to the xp
    kernel's sgemm, which was faster there; large planes take the per-image loop whatever
    the weights."""
    assert conv_grads.dw_loop(8 * 8, 50 * 20 * 5 * 5) == "batch"
    assert conv_grads.dw_loop(8 * 8, 256 * 256 * 3 * 3) is None
    assert conv_grads.dw_loop(4 * 4, 512 * 512 * 3 * 3) is None
    assert conv_grads.dw_loop(32 * 32, 64 * 64 * 3 * 3) == "image"
    assert conv_grads.dw_loop(2, 10) is None
