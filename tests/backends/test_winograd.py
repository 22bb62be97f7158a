"""Winograd F(2,3) and F(4,3) convolution (backends/xp/kernels/winograd.py) against a float64
direct convolution computed here, and the rule that routes Conv and ConvTranspose to it.

Error bounds, relative to the output's largest magnitude: the float32 transforms add rounding
in proportion to their norms. F(2,3)'s matrices hold 0, +-1/2 and +-1, so its error stays a few
float32 ulps times the GEMM's (observed below 4e-7 on these cases); F(4,3)'s span 1/15 to 8
(points 1/2 and -2), and its error grows about tenfold (observed below 3e-6). The bounds 1e-4
and 5e-4 leave a margin of over a hundred, while an indexing mistake (a wrong tile, pad or crop)
or one wrong matrix entry (1/15 made 1/16) lands far above them. In float64 the same transforms
stay within 1e-12.
"""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import portable as pt
from backends.xp.kernels import conv as conv_kernels
from backends.xp.kernels import conv_plan
from backends.xp.kernels import winograd
from portable.backend import KernelContext
from portable.errors import BackendError
from portable.ops.conv import transpose_geometry, window_geometry

BOUNDS = {(2, np.float32): 1e-4, (4, np.float32): 5e-4, (2, np.float64): 1e-12,
          (4, np.float64): 1e-12}


def _ctx():
    return KernelContext(np, np.random.default_rng(0), pt.cpu().backend)


def _attrs(**given):
    attrs = {"auto_pad": "NOTSET", "dilations": None, "pads": None, "strides": None,
             "group": 1, "kernel_shape": None}
    attrs.update(given)
    return attrs


def direct_conv(x, w, head, tail):
    """float64 correlation of X (N, C, H, W) with W (M, C, 3, 3), zero padding head/tail."""
    padded = np.pad(x.astype(np.float64),
                    ((0, 0), (0, 0), (head[0], tail[0]), (head[1], tail[1])))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", windows, w.astype(np.float64))


def direct_conv_transpose(x, w, head, out):
    """float64 ConvTranspose at stride 1 by its definition: every input element scatters
    x * w[c, m] to output positions i - head + k, those inside ``out`` kept."""
    n, c, h, wd = x.shape
    y = np.zeros((n, w.shape[1]) + tuple(out))
    for i in range(h):
        for j in range(wd):
            for a in range(3):
                for b in range(3):
                    p, q = i - head[0] + a, j - head[1] + b
                    if 0 <= p < out[0] and 0 <= q < out[1]:
                        y[:, :, p, q] += x[:, :, i, j].astype(np.float64) @ w[:, :, a, b]
    return y


def _forbid_im2col(monkeypatch):
    def fail(*args):
        raise AssertionError("im2col path taken")
    monkeypatch.setattr(conv_kernels, "conv_forward", fail)


def _random_case(rng):
    """(x shape, weight shape, attrs, head, tail) with at least one output position."""
    while True:
        n, c, m = rng.integers(1, 4), rng.integers(1, 41), rng.integers(1, 41)
        h, w = (int(v) for v in rng.integers(1, 18, 2))
        if rng.random() < 0.2:
            attrs = _attrs(auto_pad="SAME_UPPER")
            total = (2, 2)  # stride 1: the output keeps the input size
            head = tuple(t // 2 for t in total)
            tail = tuple(t - hh for t, hh in zip(total, head))
        else:
            pads = [int(p) for p in rng.integers(0, 3, 4)]
            attrs = _attrs(pads=pads)
            head, tail = tuple(pads[:2]), tuple(pads[2:])
        if h + head[0] + tail[0] >= 3 and w + head[1] + tail[1] >= 3:
            return (n, c, h, w), (m, c, 3, 3), attrs, head, tail


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tile", [2, 4])
def test_conv_matches_direct_convolution(monkeypatch, tile, dtype):
    monkeypatch.setenv(winograd.ENV, str(tile))
    _forbid_im2col(monkeypatch)
    rng = np.random.default_rng(tile)
    for _ in range(40):
        x_shape, w_shape, attrs, head, tail = _random_case(rng)
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        b = rng.standard_normal(w_shape[0]).astype(dtype)
        geom = window_geometry(x_shape[2:], (3, 3), attrs)
        y = np.full((x_shape[0], w_shape[0]) + geom.out, np.nan, dtype)
        conv_kernels.conv(_ctx(), [x, w, b], [y], attrs)
        expected = direct_conv(x, w, head, tail) + b[None, :, None, None]
        assert y.shape == expected.shape
        error = np.abs(y - expected).max() / max(np.abs(expected).max(), 1e-30)
        assert error < BOUNDS[tile, dtype], (x_shape, w_shape, attrs, error)


@pytest.mark.parametrize("tile", [2, 4])
def test_conv_into_a_strided_output(monkeypatch, tile):
    """The output tiles go through strided views of Y: a non-contiguous Y gets the same."""
    monkeypatch.setenv(winograd.ENV, str(tile))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 9, 11))
    w = rng.standard_normal((6, 5, 3, 3))
    attrs = _attrs(pads=[1, 0, 2, 1])
    geom = window_geometry(x.shape[2:], (3, 3), attrs)
    big = np.zeros((2, 12) + geom.out)
    y = big[:, ::2]
    winograd.conv2d(_ctx(), x, w, geom, tile, y)
    np.testing.assert_allclose(y, direct_conv(x, w, (1, 0), (2, 1)), rtol=0, atol=1e-11)
    assert not big[:, 1::2].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tile", [2, 4])
def test_conv_transpose_matches_its_definition(monkeypatch, tile, dtype):
    """ConvTranspose at stride 1 (Conv's dX in training) through Winograd, including pads over
    2 (the flipped Conv then crops the input) and output_shape past what X reaches."""
    monkeypatch.setenv(winograd.ENV, str(tile))
    rng = np.random.default_rng(10 + tile)
    cases = [dict(pads=[1, 1, 1, 1]), dict(pads=[0, 2, 1, 0]), dict(pads=[3, 0, 2, 4]),
             dict(), dict(output_shape=[12, 9]), dict(auto_pad="SAME_UPPER")]
    for extra in cases:
        x = rng.standard_normal((2, 7, 8, 6)).astype(dtype)
        w = rng.standard_normal((7, 5, 3, 3)).astype(dtype)
        attrs = _attrs(**{"output_padding": None, "output_shape": None, **extra})
        geom = transpose_geometry(x.shape[2:], (3, 3), attrs)
        assert winograd.transpose_tile(_ctx(), x, w, geom, 1) == tile
        y = np.full((2, 5) + geom.out, np.nan, dtype)
        conv_kernels.conv_transpose(_ctx(), [x, w], [y], attrs)
        expected = direct_conv_transpose(x, w, geom.head, geom.out)
        error = np.abs(y - expected).max() / np.abs(expected).max()
        assert error < BOUNDS[tile, dtype], (extra, error)


def test_only_eligible_convolutions_take_winograd(monkeypatch):
    """Strided, dilated, grouped, 5x5, 1-D, 3-D and float16 convolutions go to im2col even
    when Winograd is forced; each still matches the direct result where one is computed."""
    monkeypatch.setenv(winograd.ENV, "4")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 10, 10))
    w3 = rng.standard_normal((4, 4, 3, 3))
    cases = [
        (x, w3, _attrs(strides=[2, 2])),
        (x, w3, _attrs(strides=[1, 2])),
        (x, w3, _attrs(dilations=[2, 2])),
        (x, rng.standard_normal((4, 2, 3, 3)), _attrs(group=2)),
        (x, rng.standard_normal((4, 4, 5, 5)), _attrs()),
        (x, rng.standard_normal((4, 4, 3, 1)), _attrs()),
        (x[..., 0], rng.standard_normal((4, 4, 3)), _attrs()),
        (x[..., None], rng.standard_normal((4, 4, 3, 3, 1)), _attrs()),
        (x.astype(np.float16), w3.astype(np.float16), _attrs()),
    ]
    for xi, wi, attrs in cases:
        geom = window_geometry(xi.shape[2:], wi.shape[2:], attrs)
        assert winograd.tile_size(_ctx(), xi, wi, geom, attrs["group"]) == 0, attrs
    # ... and the kernel then runs im2col (never the Winograd path): a 2-strided 3x3 conv
    # agrees with the direct one.
    calls = []
    monkeypatch.setattr(conv_plan, "conv2d", lambda *args: calls.append(args))
    attrs = _attrs(strides=[2, 2], pads=[1, 1, 1, 1])
    geom = window_geometry(x.shape[2:], (3, 3), attrs)
    y = np.empty((1, 4) + geom.out)
    conv_kernels.conv(_ctx(), [x, w3], [y], attrs)
    assert calls == []
    np.testing.assert_allclose(y, direct_conv(x, w3, (1, 1), (1, 1))[:, :, ::2, ::2],
                               atol=1e-12)


def test_switch_and_automatic_rule(monkeypatch):
    rng = np.random.default_rng(4)
    geom = window_geometry((28, 28), (3, 3), _attrs(pads=[1, 1, 1, 1]))
    wide = rng.standard_normal((1, 64, 28, 28)), rng.standard_normal((64, 64, 3, 3))
    monkeypatch.delenv(winograd.ENV, raising=False)
    assert winograd.tile_size(_ctx(), *wide, geom, 1) == 0  # off unless asked for (memory)
    monkeypatch.setenv(winograd.ENV, "auto")
    assert winograd.tile_size(_ctx(), *wide, geom, 1) == 4  # float64 may use it too
    narrow = wide[0][:, :8], wide[1][:, :8]
    assert winograd.tile_size(_ctx(), *narrow, geom, 1) == 0  # C = 8: im2col
    small = window_geometry((7, 7), (3, 3), _attrs(pads=[1, 1, 1, 1]))
    assert winograd.tile_size(_ctx(), wide[0][..., :7, :7], wide[1], small, 1) == 0
    monkeypatch.setenv(winograd.ENV, "0")
    assert winograd.tile_size(_ctx(), *wide, geom, 1) == 0
    monkeypatch.setenv(winograd.ENV, "AUTO")
    assert winograd.tile_size(_ctx(), *narrow, geom, 1) == 0
    monkeypatch.setenv(winograd.ENV, "2")
    assert winograd.tile_size(_ctx(), *narrow, geom, 1) == 2
    monkeypatch.setenv(winograd.ENV, "3")
    with pytest.raises(BackendError, match="PORTABLE_WINOGRAD"):
        winograd.tile_size(_ctx(), *wide, geom, 1)


def test_cached_weights_follow_in_place_updates(monkeypatch):
    """The weight cache never serves transforms of weights that changed in place (training)
    nor of another array that reuses the buffer; float64 results stay exact to 1e-12."""
    monkeypatch.setenv(winograd.ENV, "4")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 3, 9, 9))
    w = rng.standard_normal((4, 3, 3, 3))
    attrs = _attrs(pads=[1, 1, 1, 1])
    y = np.empty((1, 4, 9, 9))
    for step in range(3):
        conv_kernels.conv(_ctx(), [x, w], [y], attrs)
        np.testing.assert_allclose(y, direct_conv(x, w, (1, 1), (1, 1)), rtol=0, atol=1e-12)
        conv_kernels.conv(_ctx(), [x, w], [y], attrs)  # a hit: same weights
        np.testing.assert_allclose(y, direct_conv(x, w, (1, 1), (1, 1)), rtol=0, atol=1e-12)
        w -= 0.1 * rng.standard_normal(w.shape)  # in place: same buffer, new values
    w[0, 0, 0, 0] = np.nan  # one changed element (even NaN) is seen
    conv_kernels.conv(_ctx(), [x, w], [y], attrs)
    assert np.isnan(y[0, 0]).any() and not np.isnan(y[0, 1:]).any()
    monkeypatch.setenv("PORTABLE_WINOGRAD_CACHE_MB", "0")
    w[0, 0, 0, 0] = 1.0
    conv_kernels.conv(_ctx(), [x, w], [y], attrs)
    np.testing.assert_allclose(y, direct_conv(x, w, (1, 1), (1, 1)), rtol=0, atol=1e-12)


def test_conv_integer_stays_exact(monkeypatch):
    """ConvInteger accumulates in float64 through im2col and relies on exact sums: Winograd
    (whose transforms hold 1/6 and 1/24) must not take it, even when forced."""
    from backends.xp.kernels.integer_linear import kernels as integer_kernels

    monkeypatch.setenv(winograd.ENV, "4")
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 40, 12, 12), dtype=np.uint8)
    w = rng.integers(0, 256, (40, 40, 3, 3), dtype=np.uint8)
    y = np.empty((1, 40, 12, 12), np.int32)
    attrs = _attrs(pads=[1, 1, 1, 1])
    integer_kernels["ConvInteger"](_ctx(), [x, w, np.uint8(3), np.uint8(5)], [y], attrs)
    padded = np.pad(x.astype(np.int64) - 3, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,mcij->nmhw", windows, w.astype(np.int64) - 5)
    np.testing.assert_array_equal(y, expected)


def test_training_input_gradient_goes_through_winograd(monkeypatch):
    """Conv's dX in training is ConvTranspose of dY with the same W, which at stride 1 runs as
    a Winograd Conv with the flipped W^T; it matches the adjoint written out here."""
    from portable import autograd, nd
    from portable.ndarray.invoke import invoke

    monkeypatch.setenv(winograd.ENV, "4")
    taken = []
    original = conv_kernels.conv_transpose2d
    monkeypatch.setattr(conv_kernels, "conv_transpose2d",
                        lambda *args: taken.append(1) or original(*args))
    rng = np.random.default_rng(8)
    x_np, w_np = rng.standard_normal((2, 6, 9, 7)), rng.standard_normal((5, 6, 3, 3))
    attrs = {"pads": [1, 0, 2, 1]}
    head = (1, 0)
    x, w = nd.array(x_np, dtype=np.float64), nd.array(w_np, dtype=np.float64)
    x.attach_grad()
    with autograd.record():
        y = invoke("Conv", [x, w], attrs)
        dy = rng.standard_normal(y.shape)
        loss = (y * nd.array(dy, dtype=np.float64)).sum()
    loss.backward()
    grad = x.grad.asnumpy()  # waits for the engine
    assert taken, "dX did not take the Winograd path"
    # dX[n, c, i, j] = sum over m, a, b of dY[n, m, i + head - a, j + head - b] W[m, c, a, b]
    expected = direct_conv_transpose(dy, w_np, head, x_np.shape[2:])
    np.testing.assert_allclose(grad, expected, rtol=0, atol=1e-11)
