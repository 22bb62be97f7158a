"""The flat products (backends/numpy/jit/flat_conv.py): the register-blocked implicit GEMM
against float64 products, the phase planes it reads against np.pad and slicing, the Convs it
runs (strides, pads, dilations, batches, channel and position counts that are not whole
blocks) against a float64 Conv, the layouts DensePlan picks, the 1x1 FusedConv path, and
the compile itself: vectorised by LLVM's SLP pass and loaded from numba's disk cache by the
next process."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from backends.numpy import jit
from portable.backend import KernelContext, array_types, bound_kernel
from tests.backends.test_jit_dense_conv import _attrs, _conv_arrays, _conv_reference, \
    _im2col_reference

import portable as pt

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")

# (N, C, H, W, M, kernel, strides, dilations, pads (top, left, bottom, right)), stride 1
FLAT_GEOMETRIES = [
    (1, 16, 11, 11, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 5, 9, 13, 20, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # 20 channels: blocks overlap
    (1, 4, 12, 10, 16, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    (1, 6, 10, 12, 24, (3, 5), (1, 1), (2, 1), (0, 2, 3, 1)),  # dilated, uneven pads
    (1, 8, 7, 9, 17, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),  # unpadded: no border
    (1, 3, 6, 6, 40, (3, 3), (1, 1), (1, 1), (2, 2, 2, 2)),  # rows of padding only
    (1, 3, 30, 30, 16, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # ResNet's stem, small
    (2, 3, 17, 19, 24, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0)),  # SqueezeNet's, unpadded
    (1, 8, 10, 12, 16, (3, 5), (1, 2), (2, 1), (0, 2, 3, 1)),  # strides differ per axis
    (1, 20, 20, 20, 64, (3, 3), (3, 3), (1, 1), (2, 0, 0, 2)),  # last rows never read
]


def _products_reference(x, w, offsets, positions):
    gathered = np.stack([x[offsets[t]:offsets[t] + positions] for t in range(len(offsets))])
    return w.astype(np.float64) @ gathered.astype(np.float64)


@pytest.mark.parametrize("m, positions", [(16, 16), (20, 37), (48, 100), (33, 17)])
def test_flat_products_equal_float64_products(m, positions):
    """Every output channel and position, whole blocks or the last block of channels or of
    positions overlapping the one before, against float64 (taps in any order, with repeats)."""
    from backends.numpy.jit import flat_conv
    from backends.numpy.jit.support import read_only
    rng = np.random.default_rng(m * positions)
    taps = 11
    offsets = rng.integers(0, 40, taps).astype(np.int64)
    x = rng.standard_normal(positions + 40).astype(np.float32)
    w = rng.standard_normal((m, taps)).astype(np.float32)
    stride = positions + 3  # (rows of Y further apart than the positions: untouched between)
    y = np.full(m * stride, np.nan, np.float32)
    flat_conv.flat_products()(read_only(x), read_only(w), y, read_only(offsets), positions,
                              stride)
    got = y.reshape(m, stride)
    np.testing.assert_allclose(got[:, :positions], _products_reference(x, w, offsets, positions),
                               rtol=1e-5, atol=1e-5)
    assert np.isnan(got[:, positions:]).all()


@pytest.mark.parametrize("config", FLAT_GEOMETRIES)
def test_phase_planes_equal_padded_slices(config):
    """Phase (a, b) of the split copy is the padded image's rows a, a + sh, ... and columns
    b, b + sw, ... (zeros past the padded image), for every image of the batch."""
    from backends.numpy.jit import dense_conv, flat_conv
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs, geom, x, wt, y = _conv_arrays(config, seed=c)
    plan = flat_conv.FlatPlan(x.shape, wt.shape, dense_conv._window_and_out(geom))
    _, sh, sw, tall, wide = plan.phases
    padded = np.pad(x, ((0, 0), (0, 0), (pads[0], sh * tall), (pads[1], sw * wide)))
    for i in range(n):
        got = np.full(plan.phases, np.nan, np.float32)
        flat_conv.split_phases(x, i, got, plan.g)
        for a in range(sh):
            for b in range(sw):
                want = padded[i, :, a::sh, b::sw][:, :tall, :wide]
                np.testing.assert_array_equal(got[:, a, b], want)


@pytest.mark.parametrize("config", FLAT_GEOMETRIES)
def test_flat_plan_matches_float64(config):
    """The flat layout on each geometry, three times through one workspace whose
    scratch starts as NaN (the elements past the padded copy that the last row's dropped
    positions read are zeroed, and no dropped position reaches Y)."""
    from backends.numpy.jit import dense_conv
    n, c, h, w, m, kernel, strides, dilations, pads = config
    attrs, geom, x, wt, y = _conv_arrays(config, seed=m + h)
    plan = dense_conv.DensePlan(array_types([x, wt]), array_types([y]), attrs)
    from backends.numpy.jit.flat_conv import FlatPlan
    assert FlatPlan.applies(x.shape, wt.shape, plan.g, x.dtype, {"columns": 1 << 22})
    plan.layout, plan.flat = "flat", FlatPlan(x.shape, wt.shape, plan.g)
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
    ctx.workspace["columns"] = np.full(1 << 22, 0xFF, np.uint8)  # (NaN as float32)
    for _ in range(3):
        x = x[:, ::-1].copy()
        cols = _im2col_reference(x, kernel, strides, dilations, pads, geom.out)
        want = np.einsum("mk,nkp->nmp", wt.reshape(m, -1).astype(np.float64), cols)
        y.fill(np.nan)
        plan.conv(ctx, x, wt, y)
        np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("shape, layout", [
    ((1, 16, 55, 55, 64, 3, 1), "flat"),  # SqueezeNet's first 3x3 expands: a short run of taps
    ((1, 128, 56, 56, 32, 3, 1), "flat"),  # DenseNet-121's growth Convs: few output channels
    ((1, 128, 56, 56, 128, 3, 2), "flat"),  # ResNet-50's first stride-2 3x3 Conv
    ((1, 64, 56, 56, 64, 3, 1), "winograd"),  # many channels on both sides
    ((1, 64, 13, 13, 256, 3, 1), "stacked"),  # 13 of every 15 positions kept
    ((1, 128, 14, 14, 128, 3, 1), "stacked"),  # 14 of every 16
    ((1, 3, 224, 224, 64, 7, 2), "flat"),  # ResNet-50's stem
    ((1, 3, 224, 224, 64, 3, 2), "columns"),  # 27 taps: sgemm on the columns
])
def test_dense_plan_takes_flat_products_where_measured_faster(shape, layout):
    from backends.numpy.jit import dense_conv
    from backends.xp.kernels.fused import conv_workspace
    n, c, h, w, m, k, s = shape  # (kernel k x k, stride s, padding k // 2)
    attrs = _attrs("Conv", kernel_shape=[k, k], pads=[k // 2] * 4, strides=[s, s])
    oh, ow = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
    types = array_types([np.empty((n, c, h, w), np.float32), np.empty((m, c, k, k), np.float32)])
    out = array_types([np.empty((n, m, oh, ow), np.float32)])
    plan = dense_conv.DensePlan(types, out, attrs)
    assert plan.layout == layout
    if layout == "flat":  # (its scratch lies within what the Conv declares)
        need = plan.flat.scratch_elements(types[0].shape, types[1].shape, plan.g) * 4
        assert need <= conv_workspace(types, out, attrs)["columns"]


def test_flat_products_take_float32_blocks_within_the_declared_scratch():
    from backends.numpy.jit.flat_conv import FlatPlan
    g1 = (3, 3, 1, 1, 1, 1, 1, 1, 20, 20)
    assert FlatPlan.applies((1, 8, 20, 20), (16, 8, 3, 3), g1, np.float32, {"columns": 1 << 20})
    assert not FlatPlan.applies((1, 8, 20, 20), (16, 8, 3, 3), g1, np.float64,
                                {"columns": 1 << 20})
    assert not FlatPlan.applies((1, 8, 20, 20), (8, 8, 3, 3), g1, np.float32,  # (M < 16)
                                {"columns": 1 << 20})
    assert not FlatPlan.applies((1, 8, 20, 20), (16, 8, 3, 3), g1, np.float32,
                                {"columns": 1000})


@pytest.mark.parametrize("n, c, side, m, residual", [(1, 64, 20, 48, True), (2, 24, 12, 40, False)])
def test_pointwise_fused_conv_runs_flat_products(n, c, side, m, residual):
    """A 1x1 FusedConv (bias, Z, Relu) takes the flat products, and equals a float64 Conv."""
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c, side, side)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    z = rng.standard_normal((n, m, side, side)).astype(np.float32) if residual else None
    conv = dict(kernel_shape=[1, 1])
    attrs = _attrs("portable.FusedConv", activation="Relu", activation_attrs=json.dumps({}),
                   **conv)
    inputs = [x, w, b] + ([z] if residual else [])
    y = np.full((n, m, side, side), np.nan, np.float32)
    types, out_types = array_types(inputs), array_types([y])
    kind, state = jit._load("portable.FusedConv").compiled_prepare(types, out_types, attrs)
    assert kind == "pointwise" and state[7] is not None
    backend = pt.cpu().backend
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=backend)
    bound_kernel(jit.kernels["portable.FusedConv"], backend, types, out_types, attrs)(
        ctx, inputs, [y], attrs)
    want = _conv_reference(x, w, b, z if residual else 0, (1, 1), (1, 1), (1, 1),
                           (0, 0, 0, 0), (side, side))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


_COMPILE = """
import json, sys
sys.path.insert(0, {root!r})
from backends.numpy.jit import flat_conv
products = flat_conv.flat_products()
asm = products.inspect_asm(flat_conv.SIGNATURE) if {asm} else ""
packed = sum(line.split()[0].endswith("ps") and ("mm" in line) and
             any(op in line for op in ("vfmadd", "vmulps", "mulps"))
             for line in asm.splitlines() if line.strip() and not line.strip().startswith("."))
print(json.dumps({{"hits": sum(products.stats.cache_hits.values()), "packed": packed}}))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_products_compile_vectorised_and_load_from_the_disk_cache(tmp_path):
    """In a fresh cache folder: the first process compiles the loop with packed
    multiply-adds (SLP on: at least one per sum row of a block), the next one loads it."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", _COMPILE.format(root=root, asm=True)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    report = json.loads(first.stdout.splitlines()[-1])
    from backends.numpy.jit.flat_conv import TILE
    assert report["packed"] >= TILE, report  # (unvectorised: scalar ss forms only)
    again = subprocess.run([sys.executable, "-c", _COMPILE.format(root=root, asm=False)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout.splitlines()[-1])["hits"] >= 1


@pytest.mark.parametrize("residual, activation", [(True, "Relu"), (False, "Clip")])
def test_fused_conv_applies_its_epilogue_as_bands_are_copied(residual, activation):
    """A FusedConv on the flat products adds bias and Z and bounds the sum while copying
    each band into Y: bit for bit the separate pass it replaces, and a float64 Conv."""
    from backends.numpy.jit import fused_conv
    rng = np.random.default_rng(int(residual))
    x = rng.standard_normal((2, 16, 30, 30)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    z = rng.standard_normal((2, 32, 30, 30)).astype(np.float32)
    bounds = {"Relu": {}, "Clip": {"min": -0.5, "max": 2.0}}[activation]
    attrs = _attrs("portable.FusedConv", activation=activation,
                   activation_attrs=json.dumps(bounds), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    inputs = [x, w, b] + ([z] if residual else [])
    y = np.full(z.shape, np.nan, np.float32)
    types, out_types = array_types(inputs), array_types([y])
    kind, state = jit._load("portable.FusedConv").compiled_prepare(types, out_types, attrs)
    plan, low, high = state[0], state[2], state[3]
    assert kind == "dense" and plan.layout == "flat"
    backend = pt.cpu().backend
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=backend)
    bound_kernel(jit.kernels["portable.FusedConv"], backend, types, out_types, attrs)(
        ctx, inputs, [y], attrs)
    separate = np.empty_like(y)
    plan.conv(ctx, x, w, separate)
    if residual:
        fused_conv.bias_residual_and_bounds(separate.reshape(2, 32, -1), b,
                                            z.reshape(2, 32, -1), low, high)
    else:
        fused_conv.bias_and_bounds(separate, b, low, high)
    np.testing.assert_array_equal(y, separate)
    cols = _im2col_reference(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (30, 30))
    raw = np.einsum("mk,nkp->nmp", w.reshape(32, -1).astype(np.float64), cols)
    raw = raw.reshape(y.shape) + b.astype(np.float64)[:, None, None] + (z if residual else 0)
    want = np.maximum(raw, 0) if activation == "Relu" else np.clip(raw, -0.5, 2.0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_without_a_cache_folder_nothing_is_written_beside_the_caller(monkeypatch, tmp_path):
    """With no numba cache folder configured, the generated source is not written (to the
    working folder): the loop then compiles from memory, uncached."""
    import numba

    from backends.numpy.jit import flat_conv
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    with pytest.raises(OSError):
        flat_conv._module_from_file("x = 1\n")
    assert not list(tmp_path.iterdir())


def test_overlapping_bands_write_each_row_once_with_an_in_place_residual(monkeypatch):
    """Small bands (the last overlapping the one before) and Z given as Y itself, as a plan's
    in-place residual hands it: every row gets bound(conv + bias + z) once, not twice."""
    from backends.numpy.jit import flat_conv
    monkeypatch.setattr(flat_conv, "BAND_ELEMENTS", 16 * 3 * 19)  # (3 rows a band of 16)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 6, 17, 17)).astype(np.float32)
    w = rng.standard_normal((16, 6, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    z = rng.standard_normal((1, 16, 17, 17)).astype(np.float32)
    plan = flat_conv.FlatPlan(x.shape, w.shape, (3, 3, 1, 1, 1, 1, 1, 1, 17, 17))
    assert plan.rows == 3 and 17 % plan.rows  # (bands of 3 rows: the last overlaps)
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
    y = z.copy()
    plan.conv(ctx, x, w, y, (b, y, np.float32(-np.inf), np.float32(np.inf)))
    cols = _im2col_reference(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (17, 17))
    raw = np.einsum("mk,nkp->nmp", w.reshape(16, -1).astype(np.float64), cols)
    want = raw.reshape(y.shape) + b.astype(np.float64)[:, None, None] + z
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
