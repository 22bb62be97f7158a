"""The compiled CPU tier (backends/numpy/jit): each override against a float64 direct loop
written window by window and against the xp kernel it replaces, over many random
configurations; the configurations it does not take fall back to the xp kernel unchanged; and
the op table's cases of the overridden ops still check the xp kernels."""
from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

import portable as pt
import tests.ops.test_op_table as op_table
from backends.numpy import create_backend, jit, kernel_table
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import KernelContext, array_types
from portable.ops import registry
from portable.ops.conv import output_padding, pool_geometry, window_geometry
from tests.ops.cases_conv import (average_pool_grad_reference, conv_grad_weight_reference,
                                  conv_transpose_reference, max_pool_grad_reference)

needs_numba = pytest.mark.skipif(not jit.available(),
                                 reason="numba is not installed (pip install 'portable[jit]')")
pytestmark = needs_numba

FLOATS = (np.float32, np.float64)


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _attrs(op: str, **given) -> dict:
    """The attributes a kernel receives: the op's defaults with ``given`` on top."""
    return {key: given.get(key, spec.default) for key, spec in registry.get(op).attrs.items()}


def _compiled(op: str):
    """The compiled kernel itself, without its fallback: a callable that returns whether its
    loop took the call (its plan-time check and its run-time one)."""
    module = jit.OVERRIDES[op][0]
    kernel = importlib.import_module(f"backends.numpy.jit.{module}").kernels[op]

    def call(ctx, inputs, outputs, attrs):
        state = kernel.compiled_prepare(array_types(inputs), array_types(outputs), attrs)
        return state is not None and kernel.compiled_run(state, ctx, inputs, outputs, attrs)
    return call


def _run(op: str, kernel, inputs, shapes, dtypes, attrs):
    outputs = [np.full(s, -7, d) for s, d in zip(shapes, dtypes)]  # stale data must not leak
    kernel(_ctx(), inputs, outputs, attrs)
    return outputs


def _both(op, inputs, shapes, dtypes, attrs):
    """(compiled outputs, xp outputs), after checking the compiled loop took the call and
    that the backend's table entry (prepared, then run) gives the same outputs."""
    outputs = [np.full(s, -7, d) for s, d in zip(shapes, dtypes)]
    assert _compiled(op)(_ctx(), inputs, outputs, attrs), f"{op} fell back for {attrs}"
    for got, want in zip(_run(op, jit.kernels[op], inputs, shapes, dtypes, attrs), outputs):
        np.testing.assert_array_equal(got, want)
    return outputs, _run(op, xp_kernels[op], inputs, shapes, dtypes, attrs)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


# -- float64 direct loops, one window at a time -----------------------------------------------


def _positions(o, geom, axis):
    return (o * geom.strides[axis] - geom.head[axis]
            + np.arange(geom.kernel[axis]) * geom.dilations[axis])


def _windows(x, geom):
    """(oh, ow, rows, cols): every window's input positions along each axis."""
    for oh, ow in itertools.product(range(geom.out[0]), range(geom.out[1])):
        yield oh, ow, _positions(oh, geom, 0), _positions(ow, geom, 1)


def max_pool_reference(x, geom, column_major):
    """Y and Indices: each window as a (N, C, kh * kw) row-major array with -inf padding;
    np.argmax gives its first maximum, padding's index is -1."""
    n, c, height, width = x.shape
    y = np.empty((n, c) + geom.out, np.float64)
    index = np.empty(y.shape, np.int64)
    base = np.arange(n * c).reshape(n, c) * height * width
    for oh, ow, rows, cols in _windows(x, geom):
        inside = ((rows >= 0) & (rows < height))[:, None] & ((cols >= 0) & (cols < width))
        window = np.full((n, c) + inside.shape, -np.inf)
        for jh, jw in zip(*np.nonzero(inside)):
            window[:, :, jh, jw] = x[:, :, rows[jh], cols[jw]]
        arg = np.argmax(window.reshape(n, c, -1), axis=-1)
        y[:, :, oh, ow] = np.take_along_axis(window.reshape(n, c, -1), arg[..., None], -1)[..., 0]
        jh, jw = np.divmod(arg, geom.kernel[1])
        flat = cols[jw] * height + rows[jh] if column_major else rows[jh] * width + cols[jw]
        index[:, :, oh, ow] = np.where(inside[jh, jw], base + flat, -1)
    return y, index


def average_pool_reference(x, geom, include_pad):
    n, c, height, width = x.shape
    y = np.empty((n, c) + geom.out, np.float64)
    for oh, ow, rows, cols in _windows(x, geom):
        total = np.zeros((n, c))
        for h, w in itertools.product(rows, cols):
            if 0 <= h < height and 0 <= w < width:
                total += x[:, :, h, w]
        if include_pad:  # declared padding counts, ceil_mode's extra reach does not
            count = (((rows >= -geom.head[0]) & (rows < height + geom.tail[0])).sum()
                     * ((cols >= -geom.head[1]) & (cols < width + geom.tail[1])).sum())
        else:
            count = (((rows >= 0) & (rows < height)).sum() * ((cols >= 0) & (cols < width)).sum())
        y[:, :, oh, ow] = total / count
    return y


FUSED_3X3_POOLS = [  # strides, pads, ceil_mode, (N, C, H, W), whether the fused loops run
    ((2, 2), (0, 0, 0, 0), 0, (1, 3, 11, 111), True),  # SqueezeNet's: odd width
    ((2, 2), (0, 0, 1, 1), 0, (1, 2, 12, 56), True),   # Inception v2's: a pad at the end
    ((2, 2), (1, 1, 1, 1), 0, (2, 2, 9, 10), True),    # ResNet's stem: a column before
    ((2, 2), (2, 2, 2, 2), 0, (1, 2, 7, 9), True),     # pads of 2: one column inside
    ((2, 2), (0, 0, 0, 0), 1, (2, 2, 8, 14), True),    # ceil_mode: a last window half out
    ((2, 2), (0, 1, 1, 0), 1, (1, 2, 4, 3), True),     # narrow planes, uneven pads
    ((2, 2), (0, 0, 0, 0), 0, (1, 2, 3, 3), True),     # one window
    ((1, 1), (1, 1, 1, 1), 0, (3, 5, 7, 9), True),     # Inception's pool branch
    ((1, 1), (1, 1, 1, 1), 0, (2, 3, 2, 2), True),     # planes of 2x2
    ((1, 1), (1, 1, 1, 1), 0, (1, 2, 13, 1), False),   # one column: the general loop
    ((1, 1), (0, 2, 2, 0), 0, (2, 2, 6, 5), False),    # as large as x, but shifted
]


@pytest.mark.parametrize("strides,pads,ceil_mode,shape,fused", FUSED_3X3_POOLS)
@pytest.mark.parametrize("loop", ["max_pool_serial", "max_pool_parallel"])
@pytest.mark.parametrize("nan_rate", [0.0, 0.004, 0.05], ids=["no-nan", "a-nan", "nans"])
def test_fused_3x3_max_pool_against_direct_loop(strides, pads, ceil_mode, shape, fused, loop,
                                               nan_rate):
    """3x3 pools at stride 2, or at stride 1 as large as the input, take fused loops with
    plain maxima; a plane that read a NaN goes again through the NaN-aware loop. Every window,
    edge ones included, against the float64 direct loop: with no NaN (the fused loops
    alone), one here and there (some planes again), and many."""
    from backends.numpy.jit import max_pool

    attrs = _attrs("MaxPool", kernel_shape=[3, 3], strides=list(strides), pads=list(pads),
                   ceil_mode=ceil_mode)
    geom = pool_geometry(shape[2:], attrs)
    prepared = max_pool._prepare_max_pool(
        array_types([np.empty(shape, np.float32)]),
        array_types([np.empty(shape[:2] + geom.out, np.float32)]), attrs)
    assert (prepared[0] is max_pool.max_pool_3x3_serial) == fused
    if fused:
        loop = loop.replace("max_pool_", "max_pool_3x3_")
    _max_pool_loop_against_direct_loop(loop, shape, sum(shape), nan_rate=nan_rate,
                                       kernel_shape=[3, 3], strides=list(strides),
                                       pads=list(pads), ceil_mode=ceil_mode)


def depthwise_reference(x, w, b, geom):
    n, c, height, width = x.shape
    m = w.shape[0]
    y = np.zeros((n, m) + geom.out) + (0 if b is None else b.reshape(1, -1, 1, 1))
    source = np.arange(m) // (m // c)
    for oh, ow, rows, cols in _windows(x, geom):
        for jh, jw in itertools.product(range(len(rows)), range(len(cols))):
            h, v = rows[jh], cols[jw]
            if 0 <= h < height and 0 <= v < width:
                y[:, :, oh, ow] += x[:, source, h, v] * w[:, 0, jh, jw]
    return y


# -- random configurations --------------------------------------------------------------------


def _pool_config(seed: int, op: str):
    """A random 2-D pool: kernel 1-5, stride 1-3, pads, dilations, ceil_mode, odd sizes,
    N and C from 1 to 8, float32 or float64; about one in five uses auto_pad."""
    rng = np.random.default_rng(seed)
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    strides = [int(s) for s in rng.integers(1, 4, 2)]
    dilations = [int(d) for d in rng.integers(1, 3, 2)] if rng.random() < 0.4 else None
    extent = [(k - 1) * (d or 1) + 1 for k, d in zip(kernel, dilations or (1, 1))]
    pads = [int(rng.integers(0, k)) for k in kernel * 2]  # ONNX: pads below the kernel
    given = dict(kernel_shape=kernel, strides=strides, dilations=dilations, pads=pads,
                 ceil_mode=int(rng.random() < 0.4))
    if rng.random() < 0.2:
        given.update(pads=None, ceil_mode=0,
                     auto_pad=str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])))
    if op in ("AveragePool", "portable.AveragePoolGrad"):
        given["count_include_pad"] = int(rng.random() < 0.5)
    if op == "MaxPool":
        given["storage_order"] = int(rng.random() < 0.3)
    shape = (int(rng.integers(1, 9)), int(rng.integers(1, 9)),
             int(rng.integers(extent[0], extent[0] + 9)),
             int(rng.integers(extent[1], extent[1] + 9)))
    dtype = FLOATS[seed % 2]
    x = rng.standard_normal(shape).astype(dtype)
    if rng.random() < 0.3:  # ties: the first maximum must win
        x = np.round(x).astype(dtype)
    attrs = _attrs(op, **{k: v for k, v in given.items() if v is not None})
    return x, attrs, pool_geometry(x.shape[2:], attrs)


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_max_pool_matches_direct_loop_and_xp(seed):
    x, attrs, geom = _pool_config(seed, "MaxPool")
    y_shape = x.shape[:2] + geom.out
    want_y, want_index = max_pool_reference(x.astype(np.float64), geom, attrs["storage_order"])
    ours, theirs = _both("MaxPool", [x], [y_shape], [x.dtype], attrs)
    np.testing.assert_array_equal(ours[0], want_y.astype(x.dtype))
    np.testing.assert_array_equal(ours[0], theirs[0])
    ours, theirs = _both("MaxPool", [x], [y_shape, y_shape], [x.dtype, np.int64], attrs)
    np.testing.assert_array_equal(ours[0], want_y.astype(x.dtype))
    np.testing.assert_array_equal(ours[1], want_index)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


@pytest.mark.parametrize("seed", range(8))
def test_max_pool_nan_and_infinity_as_argmax(seed):
    """NaN wins (the first one), -inf ties with the padding: what np.argmax over the padded
    windows gives, in Y, Indices and the gradient."""
    x, attrs, geom = _pool_config(seed, "MaxPool")
    rng = np.random.default_rng(seed)
    x.reshape(-1)[rng.random(x.size) < 0.1] = np.nan
    x.reshape(-1)[rng.random(x.size) < 0.3] = -np.inf
    y_shape = x.shape[:2] + geom.out
    want_y, want_index = max_pool_reference(x.astype(np.float64), geom, attrs["storage_order"])
    ours, theirs = _both("MaxPool", [x], [y_shape, y_shape], [x.dtype, np.int64], attrs)
    np.testing.assert_array_equal(ours[0], want_y.astype(x.dtype))
    np.testing.assert_array_equal(ours[1], want_index)
    np.testing.assert_array_equal(ours[1], theirs[1])
    ours, theirs = _both("MaxPool", [x], [y_shape], [x.dtype], attrs)
    np.testing.assert_array_equal(ours[0], theirs[0])
    dy = rng.standard_normal(y_shape).astype(x.dtype)
    grad_attrs = {k: v for k, v in attrs.items() if k != "storage_order"}
    ours, theirs = _both("portable.MaxPoolGrad", [dy, x], [x.shape], [x.dtype], grad_attrs)
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


STRIDE_ONE_POOLS = [  # kernel, pads, dilations, (N, C, H, W)
    ((3, 3), (1, 1, 1, 1), (1, 1), (3, 5, 7, 9)),    # as large as the input: whole-block passes
    ((5, 5), (2, 2, 2, 2), (1, 1), (2, 4, 6, 6)),
    ((3, 3), (2, 2, 2, 2), (2, 2), (2, 3, 8, 5)),    # dilated
    ((3, 2), (0, 1, 2, 0), (1, 1), (2, 3, 6, 7)),    # pads on one side only
    ((1, 1), (0, 0, 0, 0), (1, 1), (1, 2, 3, 4)),
    ((3, 3), (1, 1, 1, 1), (1, 1), (4, 2, 2, 2)),    # planes smaller than the kernel
    ((3, 3), (0, 0, 0, 0), (1, 1), (2, 3, 7, 6)),    # smaller output: plane by plane
    ((3, 3), (1, 0, 0, 1), (1, 1), (2, 3, 5, 8)),    # fewer rows, as many columns
]


@pytest.mark.parametrize("kernel,pads,dilations,shape", STRIDE_ONE_POOLS)
@pytest.mark.parametrize("loop", ["max_pool_serial", "max_pool_parallel"])
def test_stride_one_max_pool_against_direct_loop(kernel, pads, dilations, shape, loop):
    """Stride-1 pools take passes over whole planes or blocks of planes, whose shifts read
    across row and plane ends at the edges: every window, edge ones included, against the
    float64 direct loop, with NaN and -inf about, in both the serial and the parallel loop."""
    _max_pool_loop_against_direct_loop(loop, shape, sum(shape), kernel_shape=list(kernel),
                                       pads=list(pads), dilations=list(dilations))


def _max_pool_loop_against_direct_loop(loop: str, shape: tuple, seed: int, nan_rate=0.05,
                                      **given) -> None:
    """The compiled MaxPool ``loop`` on planes of a random x (NaN, at ``nan_rate``, and -inf
    about) equals the float64 direct loop in every window."""
    from backends.numpy.jit import max_pool
    from backends.numpy.jit.support import window_tuple

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[rng.random(x.size) < nan_rate] = np.nan
    x.reshape(-1)[rng.random(x.size) < 0.1] = -np.inf
    geom = pool_geometry(x.shape[2:], _attrs("MaxPool", **given))
    want, _ = max_pool_reference(x.astype(np.float64), geom, 0)
    y = np.full(x.shape[:2] + geom.out, 7, np.float32)
    getattr(max_pool, loop)(x.reshape((-1,) + x.shape[2:]), y.reshape((-1,) + geom.out),
                            window_tuple(geom))
    np.testing.assert_array_equal(y, want.astype(np.float32))


STRIDE_TWO_POOLS = [  # kernel, pads, dilations, (N, C, H, W); rows of 64 or more: halves
    ((3, 3), (0, 0, 0, 0), (1, 1), (1, 3, 11, 65)),  # odd width: the even half is longer
    ((3, 3), (1, 1, 1, 1), (1, 1), (2, 2, 6, 64)),   # a column before the row's start
    ((3, 3), (2, 2, 2, 2), (2, 2), (1, 2, 9, 66)),   # dilated
    ((2, 2), (0, 1, 1, 0), (1, 1), (2, 2, 7, 67)),   # pads on one side only
    ((5, 5), (2, 2, 2, 2), (1, 1), (1, 2, 6, 64)),
    ((3, 3), (1, 1, 1, 1), (1, 1), (1, 2, 5, 9)),    # a short row: no halves
]


@pytest.mark.parametrize("kernel,pads,dilations,shape", STRIDE_TWO_POOLS)
@pytest.mark.parametrize("loop", ["max_pool_serial", "max_pool_parallel"])
def test_stride_two_max_pool_against_direct_loop(kernel, pads, dilations, shape, loop):
    """At stride 2 a wide reduced row is split into its even and odd halves first: every
    window, from either half and at either end, against the float64 direct loop."""
    _max_pool_loop_against_direct_loop(loop, shape, sum(shape) + 2, kernel_shape=list(kernel),
                                       strides=[2, 2], pads=list(pads),
                                       dilations=list(dilations))


@pytest.mark.parametrize("kernel,pads,dilations,shape", STRIDE_ONE_POOLS)
@pytest.mark.parametrize("loop", ["average_pool_serial", "average_pool_parallel"])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_stride_one_average_pool_against_direct_loop(kernel, pads, dilations, shape, loop,
                                                     include_pad):
    """The same stride-1 pools, averaged (the whole-block passes of a pool as large as its
    input, and the divisors of its edge windows), against the float64 direct loop."""
    from backends.numpy.jit import average_pool
    from backends.numpy.jit.support import window_tuple

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    attrs = _attrs("AveragePool", kernel_shape=list(kernel), pads=list(pads),
                   dilations=list(dilations), count_include_pad=include_pad)
    geom = pool_geometry(x.shape[2:], attrs)
    want = average_pool_reference(x.astype(np.float64), geom, include_pad)
    y = np.full(x.shape[:2] + geom.out, 7, np.float32)
    getattr(average_pool, loop)(x.reshape((-1,) + x.shape[2:]), y.reshape((-1,) + geom.out),
                                geom.tail, bool(include_pad), window_tuple(geom))
    np.testing.assert_allclose(y, want, **_tol(np.float32))


FUSED_3X3_AVERAGE_POOLS = [  # strides, pads, ceil_mode, (N, C, H, W)
    ((1, 1), (1, 1, 1, 1), 0, (3, 5, 7, 9)),     # Inception v2's pool branch
    ((1, 1), (1, 1, 1, 1), 0, (2, 3, 2, 2)),
    ((1, 1), (1, 1, 1, 1), 0, (1, 4, 14, 14)),
    ((2, 2), (1, 1, 1, 1), 0, (1, 3, 56, 56)),   # ShuffleNet's shortcuts
    ((2, 2), (0, 0, 1, 1), 0, (1, 2, 9, 10)),
    ((2, 2), (2, 2, 2, 2), 0, (1, 2, 7, 9)),     # windows with one column inside
    ((2, 2), (0, 0, 0, 0), 1, (2, 2, 8, 13)),    # ceil_mode: a last window half out
]


@pytest.mark.parametrize("strides,pads,ceil_mode,shape", FUSED_3X3_AVERAGE_POOLS)
@pytest.mark.parametrize("loop", ["average_pool_3x3_serial", "average_pool_3x3_parallel"])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_fused_3x3_average_pool_against_direct_loop(strides, pads, ceil_mode, shape, loop,
                                                   include_pad):
    """3x3 average pools at stride 2, or at stride 1 as large as the input, take fused
    loops: the general loop's sums in its order, divided in float32 where the general loop
    divides in float64 (so within an ulp of it), and the float64 direct loop's answer to
    rounding; a shifted stride-1 pool of the same size keeps the general loop."""
    from backends.numpy.jit import average_pool
    from backends.numpy.jit.support import window_tuple

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    attrs = _attrs("AveragePool", kernel_shape=[3, 3], strides=list(strides), pads=list(pads),
                   ceil_mode=ceil_mode, count_include_pad=include_pad)
    geom = pool_geometry(x.shape[2:], attrs)
    types = array_types([x]), array_types([np.empty(shape[:2] + geom.out, np.float32)])
    assert average_pool._prepare_average_pool(*types, attrs)[0] is (
        average_pool.average_pool_3x3_serial)
    if strides == (1, 1):
        shifted = _attrs("AveragePool", kernel_shape=[3, 3], pads=[0, 2, 2, 0])
        assert average_pool._prepare_average_pool(*types, shifted)[0] is (
            average_pool.average_pool_serial)
    y, general = (np.full(x.shape[:2] + geom.out, 7, np.float32) for _ in range(2))
    args = geom.tail, bool(include_pad), window_tuple(geom)
    planes = (-1,) + x.shape[2:]
    getattr(average_pool, loop)(x.reshape(planes), y.reshape((-1,) + geom.out), *args)
    average_pool.average_pool_serial(x.reshape(planes), general.reshape((-1,) + geom.out),
                                     *args)
    np.testing.assert_array_max_ulp(y, general, maxulp=1)
    want = average_pool_reference(x.astype(np.float64), geom, include_pad)
    np.testing.assert_allclose(y, want, **_tol(np.float32))


@pytest.mark.parametrize("shape,ceil_mode,pairs", [((2, 3, 8, 10), 0, True),
                                                   ((1, 2, 7, 9), 0, True),
                                                   ((1, 2, 7, 9), 1, False)])
def test_average_pool_pairs_of_tiling_windows(shape, ceil_mode, pairs):
    """2x2 windows tiling the plane (DenseNet's transitions; odd last rows and columns read
    by none) take a loop of their own: the general loop's answer to the bit; ceil_mode's
    partial windows keep the general loop."""
    from backends.numpy.jit import average_pool
    from backends.numpy.jit.support import window_tuple

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    attrs = _attrs("AveragePool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=ceil_mode)
    geom = pool_geometry(x.shape[2:], attrs)
    types = array_types([x]), array_types([np.empty(shape[:2] + geom.out, np.float32)])
    state = average_pool._prepare_average_pool(*types, attrs)
    assert (state[0] is average_pool.average_pool_pairs) == pairs
    ours = _both("AveragePool", [x], [shape[:2] + geom.out], [x.dtype], attrs)[0][0]
    general = np.empty(shape[:2] + geom.out, np.float32)
    average_pool.average_pool_serial(x.reshape((-1,) + x.shape[2:]),
                                     general.reshape((-1,) + geom.out), geom.tail, False,
                                     window_tuple(geom))
    np.testing.assert_array_equal(ours, general)
    want = average_pool_reference(x.astype(np.float64), geom, 0)
    np.testing.assert_allclose(ours, want, **_tol(np.float32))


@pytest.mark.parametrize("kernel,shape,ceil_mode", [((2, 2), (3, 5, 24, 24), 0),
                                                    ((2, 2), (2, 3, 9, 7), 0),
                                                    ((3, 2), (2, 4, 10, 9), 0),
                                                    ((2, 2), (2, 3, 9, 7), 1)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool_grad_of_tiling_windows(kernel, shape, ceil_mode, dtype):
    """Windows that tile the plane (stride = kernel, no padding: LeNet's pools) take their own
    loop, which must pick each window's first maximum as the general one does: ties, NaN
    (the first wins) and -inf included; a ceil_mode partial window takes the general loop."""
    from backends.numpy.jit import max_pool

    rng = np.random.default_rng(sum(shape))
    x = np.round(rng.standard_normal(shape)).astype(dtype)  # (ties)
    attrs = _attrs("portable.MaxPoolGrad", kernel_shape=list(kernel), strides=list(kernel),
                   ceil_mode=ceil_mode)
    geom = pool_geometry(x.shape[2:], attrs)
    dy = rng.standard_normal(x.shape[:2] + geom.out).astype(dtype)
    loop, _ = max_pool._prepare_max_pool_grad(array_types([dy, x]), array_types([x]), attrs)
    partial = geom.out[0] * kernel[0] > shape[2] or geom.out[1] * kernel[1] > shape[3]
    assert (loop is max_pool.max_pool_grad_tiles_serial) == (not partial)
    ours, theirs = _both("portable.MaxPoolGrad", [dy, x], [x.shape], [x.dtype], attrs)
    explicit = dict(attrs, pads=list(geom.head) + list(geom.tail), auto_pad="NOTSET")
    want = max_pool_grad_reference([dy.astype(np.float64), x.astype(np.float64)], explicit)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_array_equal(ours[0], theirs[0])
    # NaN (the first one wins) and -inf: the xp kernel's argmax over the windows decides
    x.reshape(-1)[rng.random(x.size) < 0.05] = np.nan
    x.reshape(-1)[rng.random(x.size) < 0.1] = -np.inf
    ours, theirs = _both("portable.MaxPoolGrad", [dy, x], [x.shape], [x.dtype], attrs)
    np.testing.assert_array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_max_pool_grad_matches_direct_loop_and_xp(seed):
    x, attrs, geom = _pool_config(seed, "portable.MaxPoolGrad")
    dy = np.random.default_rng(seed + 1).standard_normal(x.shape[:2] + geom.out).astype(x.dtype)
    ours, theirs = _both("portable.MaxPoolGrad", [dy, x], [x.shape], [x.dtype], attrs)
    explicit = dict(attrs, pads=list(geom.head) + list(geom.tail), auto_pad="NOTSET")
    want = max_pool_grad_reference([dy.astype(np.float64), x.astype(np.float64)], explicit)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


@pytest.mark.parametrize("seed", SEEDS)
def test_average_pool_matches_direct_loop_and_xp(seed):
    x, attrs, geom = _pool_config(seed, "AveragePool")
    ours, theirs = _both("AveragePool", [x], [x.shape[:2] + geom.out], [x.dtype], attrs)
    want = average_pool_reference(x.astype(np.float64), geom, attrs["count_include_pad"])
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


@pytest.mark.parametrize("seed", SEEDS)
def test_average_pool_grad_matches_direct_loop_and_xp(seed):
    x, attrs, geom = _pool_config(seed, "portable.AveragePoolGrad")
    dy = np.random.default_rng(seed + 1).standard_normal(x.shape[:2] + geom.out).astype(x.dtype)
    ours, theirs = _both("portable.AveragePoolGrad", [dy, x], [x.shape], [x.dtype], attrs)
    explicit = dict(attrs, pads=list(geom.head) + list(geom.tail), auto_pad="NOTSET")
    want = average_pool_grad_reference([dy.astype(np.float64), x.astype(np.float64)],
                                       explicit)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


def _depthwise_config(seed: int):
    """A random depthwise Conv: C from 2 to 8 groups, channel multiplier 1-3, kernel 1-5,
    stride 1-3, dilations, pads (or auto_pad), with or without bias."""
    rng = np.random.default_rng(100 + seed)
    c, multiplier = int(rng.integers(2, 9)), int(rng.integers(1, 4))
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    dilations = [int(d) for d in rng.integers(1, 3, 2)]
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    given = dict(group=c, strides=[int(s) for s in rng.integers(1, 4, 2)], dilations=dilations,
                 pads=[int(rng.integers(0, k)) for k in kernel * 2])
    if rng.random() < 0.2:
        given.update(pads=None, auto_pad=str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])))
    dtype = FLOATS[seed % 2]
    size = [int(rng.integers(e, e + 8)) for e in extent]
    x = rng.standard_normal((int(rng.integers(1, 5)), c, *size)).astype(dtype)
    w = rng.standard_normal((c * multiplier, 1, *kernel)).astype(dtype)
    b = rng.standard_normal(c * multiplier).astype(dtype) if rng.random() < 0.5 else None
    attrs = _attrs("Conv", **{k: v for k, v in given.items() if v is not None})
    return x, w, b, attrs, window_geometry(x.shape[2:], w.shape[2:], attrs)


@pytest.mark.parametrize("seed", SEEDS)
def test_depthwise_conv_matches_direct_loop_and_xp(seed):
    x, w, b, attrs, geom = _depthwise_config(seed)
    inputs = [x, w] if b is None else [x, w, b]
    ours, theirs = _both("Conv", inputs, [(x.shape[0], w.shape[0]) + geom.out], [x.dtype], attrs)
    want = depthwise_reference(x.astype(np.float64), w.astype(np.float64),
                               None if b is None else b.astype(np.float64), geom)
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


@pytest.mark.parametrize("seed", range(16))
def test_depthwise_conv_at_stride_1_runs_whole_plane_offsets(seed):
    """Stride 1 and dilation 1 on planes past the channel-inner loop's size take
    ``conv_wide`` (each kernel offset one run over a zero-padded plane): random kernels,
    pads (asymmetric, or auto_pad), multipliers and sizes, against the float64 reference and
    the xp kernel."""
    from backends.numpy.jit import depthwise

    rng = np.random.default_rng(700 + seed)
    c, multiplier = int(rng.integers(2, 9)), int(rng.integers(1, 3))
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    given = dict(group=c, pads=[int(rng.integers(0, k)) for k in kernel * 2])
    if seed % 4 == 3:
        given = dict(group=c, auto_pad=["SAME_UPPER", "SAME_LOWER", "VALID"][seed % 3])
    dtype = FLOATS[seed % 2]
    size = [int(rng.integers(k + 8, k + 20)) for k in kernel]
    x = rng.standard_normal((int(rng.integers(1, 3)), c, *size)).astype(dtype)
    w = rng.standard_normal((c * multiplier, 1, *kernel)).astype(dtype)
    b = rng.standard_normal(c * multiplier).astype(dtype) if seed % 2 else None
    attrs = _attrs("Conv", **given)
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    inputs = [x, w] if b is None else [x, w, b]
    y_shape = (x.shape[0], w.shape[0]) + geom.out
    state = depthwise.plan_conv(array_types(inputs), array_types([np.empty(y_shape, dtype)]),
                                attrs)
    assert state[0] is depthwise.conv_wide
    ours, theirs = _both("Conv", inputs, [y_shape], [x.dtype], attrs)
    want = depthwise_reference(x.astype(np.float64), w.astype(np.float64),
                               None if b is None else b.astype(np.float64), geom)
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_depthwise_gradients_match_direct_loops_and_xp(seed):
    """The two ops Conv's gradient emits for a depthwise Conv: ConvTranspose(dY, W) for dX
    and ConvGradWeight(X, dY) for dW, with the attributes the gradient rule gives them."""
    x, w, _, attrs, geom = _depthwise_config(seed)
    dy = np.random.default_rng(seed).standard_normal(
        (x.shape[0], w.shape[0]) + geom.out).astype(x.dtype)
    explicit = dict(strides=list(geom.strides), dilations=list(geom.dilations),
                    pads=list(geom.head) + list(geom.tail), group=attrs["group"])
    transpose = _attrs("ConvTranspose", **explicit,
                       output_padding=list(output_padding(geom, x.shape[2:])))
    ours, theirs = _both("ConvTranspose", [dy, w], [x.shape], [x.dtype], transpose)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    want = conv_transpose_reference([dy64, w64], transpose)[0]
    np.testing.assert_allclose(ours[0], want, **_tol(x.dtype))
    np.testing.assert_allclose(ours[0], theirs[0], **_tol(x.dtype))
    weight = _attrs("portable.ConvGradWeight", **explicit, kernel_shape=list(geom.kernel))
    ours, theirs = _both("portable.ConvGradWeight", [x, dy], [w.shape], [x.dtype], weight)
    want = conv_grad_weight_reference([x64, dy64], weight)[0]
    tol = dict(rtol=1e-4, atol=1e-4) if x.dtype == np.float32 else _tol(x.dtype)
    np.testing.assert_allclose(ours[0], want, **tol)
    np.testing.assert_allclose(ours[0], theirs[0], **tol)


def test_depthwise_gradients_match_finite_differences():
    """dX and dW of sum(Conv(X, W) * H) for a small float64 depthwise Conv, by central
    differences of the direct loop."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((6, 1, 3, 2))
    attrs = _attrs("Conv", group=3, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    heads = rng.standard_normal((2, 6) + geom.out)
    explicit = dict(strides=[2, 1], dilations=[1, 2], pads=list(geom.head) + list(geom.tail),
                    group=3)
    dx = _both("ConvTranspose", [heads, w], [x.shape], [x.dtype], _attrs(
        "ConvTranspose", **explicit, output_padding=list(output_padding(geom, x.shape[2:]))))[0]
    dw = _both("portable.ConvGradWeight", [x, heads], [w.shape], [w.dtype],
               _attrs("portable.ConvGradWeight", **explicit, kernel_shape=[3, 2]))[0]

    def loss(x_, w_):
        return float((depthwise_reference(x_, w_, None, geom) * heads).sum())

    for value, grad in ((x, dx[0]), (w, dw[0])):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            step = np.zeros_like(value)
            step[i] = 1e-6
            args = (x + step, w) if value is x else (x, w + step)
            back = (x - step, w) if value is x else (x, w - step)
            numeric[i] = (loss(*args) - loss(*back)) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)


def test_parallel_loops_match_xp(monkeypatch):
    """With the parallel threshold at zero every call takes the prange loops; they agree with
    the xp kernels like the serial ones do."""
    from backends.numpy.jit import support

    monkeypatch.setattr(support, "PARALLEL_WORK", 0)
    if not support.parallel(2, 1):
        pytest.skip("numba runs one thread here, or has no thread-safe threading layer")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 32, 40, 40)).astype(np.float32)
    for op in ("MaxPool", "AveragePool"):
        attrs = _attrs(op, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
        shape = x.shape[:2] + pool_geometry(x.shape[2:], attrs).out
        outputs = [shape, shape][:2 if op == "MaxPool" else 1]
        ours, theirs = _both(op, [x], outputs, [x.dtype, np.int64], attrs)
        for got, want in zip(ours, theirs):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        dy = rng.standard_normal(shape).astype(x.dtype)
        ours, theirs = _both(f"portable.{op}Grad", [dy, x], [x.shape], [x.dtype], attrs)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    w = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    attrs = _attrs("Conv", group=32, pads=[1, 1, 1, 1])
    ours, theirs = _both("Conv", [x, w], [(2, 64, 40, 40)], [x.dtype], attrs)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


# -- fallback -------------------------------------------------------------------------------


def _unsupported():
    rng = np.random.default_rng(9)
    x3 = rng.standard_normal((1, 2, 5, 4, 6)).astype(np.float32)
    xi = rng.integers(-50, 50, (2, 3, 7, 6)).astype(np.int32)
    x1 = rng.standard_normal((2, 3, 9)).astype(np.float64)
    strided = rng.standard_normal((2, 3, 8, 14)).astype(np.float32)[:, :, :, ::2]
    pool3 = dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1])
    pool2 = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    yield "MaxPool", [x3], pool3, True
    yield "MaxPool", [xi], pool2, True
    yield "MaxPool", [strided], pool2, True
    yield "AveragePool", [x3], dict(pool3, count_include_pad=1), False
    yield "AveragePool", [x1], dict(kernel_shape=[3], strides=[2], pads=[1, 1]), False
    w3 = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    yield "Conv", [strided, w3], dict(group=3), False
    # (a dense Conv on a strided input: the compiled tiers index C-contiguous arrays only)
    yield "Conv", [strided, w3[:1].repeat(3, axis=1)], dict(group=1), False
    grouped = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    yield "Conv", [rng.standard_normal((1, 4, 6, 6)).astype(np.float32),
                   rng.standard_normal((4, 2, 3, 3)).astype(np.float32)], dict(group=2), False
    yield "Conv", [rng.standard_normal((1, 4, 6, 6)).astype(np.float16), grouped.astype(
        np.float16)], dict(group=4), False


UNSUPPORTED = list(_unsupported())


@pytest.mark.parametrize("case", UNSUPPORTED,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(UNSUPPORTED)])
def test_unsupported_configurations_give_the_xp_answer(case):
    op, inputs, given, indices = case
    attrs = _attrs(op, **given)
    if op == "Conv":
        shape = (inputs[0].shape[0], inputs[1].shape[0]) + window_geometry(
            inputs[0].shape[2:], inputs[1].shape[2:], attrs).out
    else:
        shape = inputs[0].shape[:2] + pool_geometry(inputs[0].shape[2:], attrs).out
    shapes, dtypes = [shape], [inputs[0].dtype]
    if indices:
        shapes, dtypes = shapes + [shape], dtypes + [np.int64]
    assert not _compiled(op)(_ctx(), inputs, [np.empty(s, d) for s, d in zip(shapes, dtypes)],
                             attrs)
    ours = _run(op, jit.kernels[op], inputs, shapes, dtypes, attrs)
    theirs = _run(op, xp_kernels[op], inputs, shapes, dtypes, attrs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_backend_table_and_switch(monkeypatch):
    assert kernel_table(compiled=True)["MaxPool"] is jit.kernels["MaxPool"]
    assert kernel_table(compiled=False)["MaxPool"] is xp_kernels["MaxPool"]
    monkeypatch.setenv("PORTABLE_JIT", "0")
    assert kernel_table()["AveragePool"] is xp_kernels["AveragePool"]
    monkeypatch.setenv("PORTABLE_JIT", "1")
    assert kernel_table()["AveragePool"] is jit.kernels["AveragePool"]
    assert "compiled tier on" in create_backend(pt.cpu()).describe()
    monkeypatch.setenv("PORTABLE_JIT", "0")
    assert "compiled tier off" in create_backend(pt.cpu()).describe()


# -- the op table on the plain xp kernels ---------------------------------------------------


@pytest.fixture
def xp_cpu(monkeypatch):
    """The cpu device's NumPy backend with the plain xp table (PORTABLE_JIT=0 semantics), so
    the op table's cases check the kernels the compiled ones replace."""
    backend = pt.cpu().backend
    monkeypatch.setattr(backend, "kernels", kernel_table(compiled=False))
    return backend


OVERRIDDEN = [c for c in op_table.CASES if c.op in jit.OVERRIDES]
# (the private gradient ops are not differentiable: these are MaxPool, AveragePool, Conv and
# ConvTranspose, whose gradient graphs run the other overridden kernels)
OVERRIDDEN_GRAD = [c for c in op_table.GRAD_CASES if c.op in jit.OVERRIDES]


@pytest.mark.parametrize("case", OVERRIDDEN, ids=[c.id for c in OVERRIDDEN])
def test_op_table_forward_on_xp_kernels(case, xp_cpu):
    assert xp_cpu.kernel(case.op) is xp_kernels[case.op]
    op_table.test_forward_matches_reference(case)


@pytest.mark.parametrize("case", OVERRIDDEN_GRAD, ids=[c.id for c in OVERRIDDEN_GRAD])
def test_op_table_gradient_on_xp_kernels(case, xp_cpu):
    op_table.test_gradient_matches_finite_differences(case)


# -- MaxPool 2x2 at stride 2 on tiling windows: its own loop, bound directly -----------------


@pytest.mark.parametrize("shape", [(1, 6, 28, 28), (1, 16, 10, 10), (2, 3, 9, 7), (3, 2, 2, 2)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool_2x2_pairs(shape, dtype):
    """The pairs loop (odd last rows and columns read by no window) against the direct loop
    and the xp kernel, NaN (which wins over every number), -inf and inf included; bound as a
    plan binds it, and on a strided view (which the xp kernel takes)."""
    from backends.numpy.jit import max_pool
    from portable.backend import bound_kernel

    rng = np.random.default_rng(sum(shape))
    x = np.round(rng.standard_normal(shape) * 3).astype(dtype)  # (ties)
    flat = x.reshape(-1)
    flat[rng.random(x.size) < 0.05] = np.nan
    flat[rng.random(x.size) < 0.05] = -np.inf
    flat[rng.random(x.size) < 0.02] = np.inf
    attrs = _attrs("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    geom = pool_geometry(x.shape[2:], attrs)
    y_shape = x.shape[:2] + geom.out
    loop, _ = max_pool._prepare_max_pool(array_types([x]), array_types([np.empty(y_shape, dtype)]),
                                         attrs)
    assert loop is max_pool.max_pool_pairs
    ours, theirs = _both("MaxPool", [x], [y_shape], [x.dtype], attrs)
    want = max_pool_reference(x.astype(np.float64), geom, 0)[0]
    np.testing.assert_array_equal(ours[0], want.astype(dtype))
    np.testing.assert_array_equal(ours[0], theirs[0])
    backend = pt.cpu().backend
    bound = bound_kernel(jit.kernels["MaxPool"], backend, array_types([x]),
                         array_types([ours[0]]), attrs)
    assert bound.__name__ == "max_pool_2x2"  # (the loop itself, no general wrapper)
    for given in (x, np.repeat(x, 2, axis=3)[..., ::2]):  # (the same values, strided)
        y = np.full(y_shape, -7, dtype)
        bound(_ctx(), [given], [y], attrs)
        np.testing.assert_array_equal(y, theirs[0])


@pytest.mark.parametrize("case", ["ceil_mode partial window", "padding", "3x3", "stride 1",
                                  "Indices"])
def test_max_pool_pairs_not_taken(case):
    """Only 2x2 windows at stride 2 that tile the plane, without Indices, take the pairs
    loop; the others keep the general loops, still right."""
    from backends.numpy.jit import max_pool

    x = np.random.default_rng(5).standard_normal((2, 3, 9, 7)).astype(np.float32)
    given = {"ceil_mode partial window": dict(ceil_mode=1), "padding": dict(pads=[1, 1, 1, 1]),
             "3x3": dict(kernel_shape=[3, 3], strides=[3, 3]), "stride 1": dict(strides=[1, 1]),
             "Indices": {}}[case]
    attrs = _attrs("MaxPool", **{"kernel_shape": [2, 2], "strides": [2, 2], **given})
    geom = pool_geometry(x.shape[2:], attrs)
    y_shape = x.shape[:2] + geom.out
    outputs = [y_shape, y_shape] if case == "Indices" else [y_shape]
    dtypes = [x.dtype, np.int64][:len(outputs)]
    state = max_pool._prepare_max_pool(array_types([x]), array_types(
        [np.empty(s, d) for s, d in zip(outputs, dtypes)]), attrs)
    assert state[0] is not max_pool.max_pool_pairs
    ours, theirs = _both("MaxPool", [x], outputs, dtypes, attrs)
    want = max_pool_reference(x.astype(np.float64), geom, 0)
    np.testing.assert_array_equal(ours[0], want[0].astype(np.float32))
    for got, expected in zip(ours, theirs):
        np.testing.assert_array_equal(got, expected)
