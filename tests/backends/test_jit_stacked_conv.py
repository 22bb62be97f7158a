"""The compiled Conv on row-stacked windows (backends/numpy/jit/stacked_conv.py): the stacked
copy against np.pad and slicing, the whole Conv against a float64 Conv summed window by
window over the geometries it must handle (strides, row dilation, asymmetric pads, windows
that leave the last rows unread or read only padding), its choice of scratch, and when it
keeps its reordered weight: only for the same read-only array."""
from __future__ import annotations

import numpy as np
import pytest

from backends.numpy import jit
from backends.xp.kernels.fused import conv_workspace
from portable.backend import KernelContext
from portable.ir.types import TensorType
from portable.ops import registry
from portable.ops.conv import window_geometry

import portable as pt

needs_numba = pytest.mark.skipif(not jit.available(),
                                 reason="numba is not installed (pip install 'portable[jit]')")

# (N, C, H, W, M, kernel, strides, dilations, pads (top, left, bottom, right))
GEOMETRIES = [
    (1, 16, 8, 8, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 16, 9, 7, 13, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),   # M and pixels not of 4
    (1, 6, 14, 14, 16, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0)),  # LeNet's second Conv
    (3, 8, 10, 12, 6, (3, 5), (1, 2), (2, 1), (0, 2, 3, 1)),   # row dilation, odd pads
    (1, 20, 6, 6, 5, (3, 3), (3, 3), (1, 1), (2, 0, 0, 2)),    # last rows never read
    (1, 12, 4, 4, 7, (5, 5), (1, 1), (1, 1), (4, 4, 4, 4)),    # windows all padding
    (1, 128, 4, 4, 128, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 270, 9, 15, 8, (3, 3), (2, 1), (1, 1), (1, 0, 1, 2)),  # (the blocked transpose)
]


def _attrs(**given):
    return {k: given.get(k, spec.default) for k, spec in registry.get("Conv").attrs.items()}


def _setup(config, dtype, seed=0):
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs = _attrs(kernel_shape=list(kernel), strides=list(strides),
                   dilations=list(dilations), pads=list(pads))
    geom = window_geometry((h, w), kernel, attrs)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    weight = rng.standard_normal((m, c) + tuple(kernel)).astype(dtype)
    g = (*geom.kernel, *geom.strides, *geom.dilations, *geom.head, *geom.out)
    types = ([TensorType(x.shape, x.dtype), TensorType(weight.shape, weight.dtype)],
             [TensorType((n, m) + tuple(geom.out), x.dtype)])
    return x, weight, g, geom, attrs, types


def _reference(x, weight, config, out):
    """Conv in float64, one kernel offset at a time over an np.pad copy."""
    n, c, h, w, m, kernel, strides, dilations, pads = config
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2] + 8),
                                           (pads[1], pads[3] + 8)))
    y = np.zeros((n, m) + tuple(out))
    for jh in range(kernel[0]):
        for jw in range(kernel[1]):
            top, left = jh * dilations[0], jw * dilations[1]
            window = padded[:, :, top:top + out[0] * strides[0]:strides[0],
                            left:left + out[1] * strides[1]:strides[1]]
            y += np.einsum("nchw,mc->nmhw", window, weight[:, :, jh, jw].astype(np.float64))
    return y


def _context():
    return KernelContext(np, np.random.default_rng(0), pt.cpu().backend)


@needs_numba
@pytest.mark.parametrize("config", GEOMETRIES)
def test_stacked_copy_matches_padded_slices(config):
    from backends.numpy.jit import stacked_conv

    x, _, g, geom, _, _ = _setup(config, np.float32)
    kh, kw, sh, sw, dh = g[:5]
    ph, pw, oh, ow = g[6:]
    wide = (ow - 1) * sw + kw
    t = np.full((oh, wide, kh, x.shape[1]), np.nan, np.float32)  # (every element written)
    nhwc = np.empty(x.shape[2:] + x.shape[1:2], np.float32)
    stacked_conv.stack_rows(x, x.shape[0] - 1, nhwc, t, g)
    padded = np.pad(x[-1], ((0, 0), (ph, oh * sh + kh * dh), (pw, wide)))
    for jh in range(kh):
        rows = padded[:, jh * dh:jh * dh + oh * sh:sh, :wide]  # (C, oh, wide)
        np.testing.assert_array_equal(t[:, :, jh, :], rows.transpose(1, 2, 0))


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", GEOMETRIES)
def test_conv_matches_float64_reference(config, dtype):
    from backends.numpy.jit.stacked_conv import StackedPlan

    x, weight, g, geom, attrs, (inputs, outputs) = _setup(config, dtype)
    workspace = conv_workspace(inputs, outputs, attrs)
    plan = StackedPlan(x.shape, weight.shape, g, dtype, workspace)
    plan.warm()
    y = np.full(outputs[0].shape, np.nan, dtype)
    ctx = _context()
    plan.conv(ctx, x, weight, y)
    expected = _reference(x, weight, config, geom.out)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, expected, rtol=tol, atol=tol * np.abs(expected).max())
    # The scratch it took is no more than the Conv and the loop declare.
    declared = {**workspace, **plan.workspace}
    for key, buffer in ctx.workspace.items():
        assert buffer.nbytes <= declared[key], key


@needs_numba
@pytest.mark.parametrize("chunk", [4, 8, 12, 28, 1000])
@pytest.mark.parametrize("config", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[7]])
def test_window_products_in_pixel_chunks_match_the_reference(config, chunk):
    """Pixels in runs of ``chunk`` (as ``pixel_chunk`` sets them for a copy too large to stay
    in cache): every chunk size, including ones that end inside an output row and past the
    last pixel, gives the float64 Conv."""
    from backends.numpy.jit import stacked_conv

    x, weight, g, geom, _, _ = _setup(config, np.float32)
    kh, kw, _, sw = g[:4]
    oh, ow = g[8:]
    t = np.empty((oh, (ow - 1) * sw + kw, kh, x.shape[1]), np.float32)
    nhwc = np.empty(x.shape[2:] + x.shape[1:2], np.float32)
    packed = np.empty((weight.shape[0], weight[0].size), np.float32)
    stacked_conv.reorder_weights(weight, packed)
    expected = _reference(x, weight, config, geom.out)
    for i in range(x.shape[0]):
        stacked_conv.stack_rows(x, i, nhwc, t, g)
        out = np.full((weight.shape[0], oh * ow), np.nan, np.float32)
        stacked_conv.window_products(t, packed, out, sw, ow, np.float32(0), chunk)
        np.testing.assert_allclose(out.reshape(expected[i].shape), expected[i], rtol=2e-5,
                                   atol=2e-5 * np.abs(expected).max())


@needs_numba
def test_pixel_chunk_is_everything_while_the_copy_stays_in_cache():
    from backends.numpy.jit.stacked_conv import (CHUNK_ELEMENTS, RESIDENT_ELEMENTS,
                                                 pixel_chunk)

    small = np.empty((4, 6, 3, 16), np.float32)
    assert pixel_chunk(small, 1, 4) == 16
    rows = RESIDENT_ELEMENTS // (226 * 3 * 64) + 1  # 64 channels, 224 wide: past the limit
    large = np.empty((rows, 226, 3, 64), np.float32)
    chunk = pixel_chunk(large, 1, 224)
    assert chunk % 4 == 0 and chunk * 3 * 64 <= CHUNK_ELEMENTS < (chunk + 4) * 3 * 64


@needs_numba
def test_applies_only_to_long_runs_small_weights_and_fitting_scratch():
    from backends.numpy.jit.stacked_conv import PACK_BYTES, STACK_K, StackedPlan

    def applies(config, dtype=np.float32):
        x, weight, g, _, attrs, (inputs, outputs) = _setup(config, dtype)
        return StackedPlan.applies(x.shape, weight.shape, g, np.dtype(dtype).itemsize,
                                   conv_workspace(inputs, outputs, attrs))

    assert applies(GEOMETRIES[0])
    short = (1, STACK_K // 9 - 1, 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    assert not applies(short)
    c = STACK_K // 9 + 1
    big = PACK_BYTES // (4 * 9 * c) + 1  # output channels past the kept weight's limit
    assert not applies((1, c, 4, 4, big, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)))
    assert applies((1, c, 4, 4, big - 2, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)))
    dilated_columns = (1, 16, 8, 8, 8, (3, 3), (1, 1), (1, 2), (2, 2, 2, 2))
    assert not applies(dilated_columns)


@needs_numba
def test_reordered_weight_kept_only_for_the_same_read_only_array():
    from backends.numpy.jit.stacked_conv import StackedPlan

    config = GEOMETRIES[0]
    x, weight, g, geom, attrs, (inputs, outputs) = _setup(config, np.float32)
    plan = StackedPlan(x.shape, weight.shape, g, np.float32,
                       conv_workspace(inputs, outputs, attrs))
    ctx, y = _context(), np.empty(outputs[0].shape, np.float32)

    def check(w):
        plan.conv(ctx, x, w, y)
        np.testing.assert_allclose(y, _reference(x, w, config, geom.out), rtol=2e-5,
                                   atol=1e-4)

    # A writeable weight changed in place between calls (a trained parameter) is re-read.
    check(weight)
    weight *= -2
    check(weight)
    # A read-only weight is kept; another read-only array is reordered again.
    frozen = weight.copy()
    frozen.setflags(write=False)
    check(frozen)
    assert plan.source is frozen
    other = (weight + 1).astype(np.float32)
    other.setflags(write=False)
    check(other)
    assert plan.source is other


@needs_numba
@pytest.mark.parametrize("config", [GEOMETRIES[0], GEOMETRIES[1], GEOMETRIES[6]])
def test_fused_conv_takes_the_stacked_loop_with_bias_residual_and_relu(config):
    """The whole compiled FusedConv (bias, residual Z, Relu) through a plan's workspace, three
    runs with new inputs (run 2 on reuses the kept views and weight), against float64."""
    import json

    from backends.numpy.jit import dense_conv
    from portable.backend import array_types, bound_kernel

    x, weight, _, geom, conv_attrs, (inputs, outputs) = _setup(config, np.float32)
    fused_attrs = {k: spec.default for k, spec in registry.get("portable.FusedConv").attrs.items()}
    fused_attrs.update({k: v for k, v in conv_attrs.items() if k in fused_attrs},
                       activation="Relu", activation_attrs=json.dumps({}))
    rng = np.random.default_rng(1)
    bias = rng.standard_normal(weight.shape[0]).astype(np.float32)
    weight.setflags(write=False)  # (a graph's initializer)
    assert dense_conv.DensePlan(inputs, outputs, conv_attrs).layout == "stacked"
    backend = pt.cpu().backend
    y = np.empty(outputs[0].shape, np.float32)
    z = rng.standard_normal(y.shape).astype(np.float32)
    types = array_types([x, weight, bias, z])
    run = bound_kernel(jit.kernels["portable.FusedConv"], backend, types, outputs, fused_attrs)
    ctx = _context()
    ctx.workspace.update({key: np.empty(size, np.uint8)
                          for key, size in conv_workspace(inputs, outputs, conv_attrs).items()})
    for _ in range(3):
        x = rng.standard_normal(x.shape).astype(np.float32)
        run(ctx, [x, weight, bias, z], [y], fused_attrs)
        want = np.maximum(_reference(x, weight, config, geom.out)
                          + bias[:, None, None].astype(np.float64) + z, 0)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@needs_numba
def test_the_plan_is_told_the_bytes_of_the_kept_weight():
    """The FusedConv table entry declares what the stacked loop keeps (``held``), which the
    memory report and the budget count: the reordered weight, M * C * kh * kw elements, and
    nothing for a Conv the loop does not take."""
    import json

    def held(config):
        x, weight, _, _, conv_attrs, (inputs, outputs) = _setup(config, np.float32)
        attrs = {k: spec.default for k, spec in registry.get("portable.FusedConv").attrs.items()}
        attrs.update({k: v for k, v in conv_attrs.items() if k in attrs},
                     activation="Relu", activation_attrs=json.dumps({}))
        return jit.kernels["portable.FusedConv"].held(inputs, outputs, attrs)

    n, c, h, w, m, kernel = GEOMETRIES[6][:6]
    assert held(GEOMETRIES[6]) == m * c * kernel[0] * kernel[1] * 4
    assert held((1, 3, 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))) == 0  # (run of 27)


@needs_numba
def test_a_large_weight_is_reordered_per_call_into_declared_scratch():
    """Past ``PACK_BYTES`` nothing is kept: the weight is reordered on every call into the
    "reordered_weights" scratch that the FusedConv declares, and a changed weight is read."""
    import json

    from backends.numpy.jit import stacked_conv

    config = (1, 64, 12, 12, 512, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))  # (1.2 MB weight)
    x, weight, g, geom, conv_attrs, (inputs, outputs) = _setup(config, np.float32)
    assert weight.nbytes > stacked_conv.PACK_BYTES
    attrs = {k: spec.default for k, spec in registry.get("portable.FusedConv").attrs.items()}
    attrs.update({k: v for k, v in conv_attrs.items() if k in attrs},
                 activation="", activation_attrs=json.dumps({}))
    entry = jit.kernels["portable.FusedConv"]
    declared = entry.workspace(inputs, outputs, attrs)
    assert declared["reordered_weights"] == weight.nbytes
    assert entry.held(inputs, outputs, attrs) == 0
    plan = stacked_conv.StackedPlan(x.shape, weight.shape, g, np.float32,
                                    conv_workspace(inputs, outputs, conv_attrs))
    ctx = _context()
    ctx.workspace.update({key: np.empty(size, np.uint8) for key, size in declared.items()})
    weight.setflags(write=False)
    y = np.empty(outputs[0].shape, np.float32)
    for scale in (1, -3):
        w = (weight * scale).astype(np.float32)
        w.setflags(write=False)
        plan.conv(ctx, x, w, y)
        want = _reference(x, w, config, geom.out)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    assert plan.packed is None and all(ctx.workspace[k].nbytes == declared[k] for k in declared)
    # On a small image a weight this large is not worth reordering per call.
    small = (1, 64, 4, 4, 512, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    x, weight, g, _, conv_attrs, (inputs, outputs) = _setup(small, np.float32)
    assert not stacked_conv.StackedPlan.applies(x.shape, weight.shape, g, 4,
                                                conv_workspace(inputs, outputs, conv_attrs))
