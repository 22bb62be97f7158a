"""Conv's gradient kernels (backends/xp/kernels/conv_grads.py) and the Conv plan's batch-wide
GEMM: every ConvTranspose formulation, forced, against the float64 scatter reference of the op
table on each boundary (stride 1 vs 2, groups, dilations, pads beyond the kernel, output_padding,
auto_pad, 1-D and 3-D); the plan-time rule on the shapes it was measured on; ConvGradWeight and
the batched Conv against their references."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.xp.kernels import conv_grads, conv_plan
from backends.xp.kernels.conv_grads import TRANSPOSE_PATHS, GradWeightPlan, TransposePlan
from portable.backend import KernelContext
from portable.ir.graph import TensorType
from portable.ops.conv import output_padding, transpose_geometry, window_geometry
from tests.ops.cases_conv import conv_grad_weight_reference, conv_transpose_reference


def _ctx():
    return KernelContext(np, np.random.default_rng(0), pt.cpu().backend)


def _rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _attrs(**given):
    attrs = {"auto_pad": "NOTSET", "dilations": None, "pads": None, "strides": None,
             "group": 1, "kernel_shape": None, "output_padding": None, "output_shape": None}
    attrs.update(given)
    return attrs


def _types(*arrays):
    return [TensorType(a.shape, a.dtype) for a in arrays]


# name -> (X shape, W shape, attributes, whether flip applies)
TRANSPOSE_CASES = {
    "s1_pad1": ((2, 4, 5, 5), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    "s1_5x5_grows": ((2, 3, 4, 4), (3, 2, 5, 5), {}, True),
    "s1_groups": ((2, 4, 4, 5), (4, 3, 3, 3), dict(group=2, pads=[1, 0, 0, 1]), True),
    "s1_dilations": ((2, 2, 5, 6), (2, 3, 3, 3), dict(dilations=[2, 1], pads=[1, 1, 2, 0]),
                     True),
    "s1_dilated_output_padding": ((2, 1, 3, 3), (1, 2, 2, 2),
                                  dict(dilations=[2, 2], output_padding=[1, 1]), True),
    "s1_pads_beyond_kernel": ((2, 2, 6, 6), (2, 2, 3, 3), dict(pads=[3, 3, 3, 3]), False),
    "s1_pads_at_extent": ((2, 2, 6, 6), (2, 2, 3, 3), dict(pads=[2, 2, 2, 2]), True),
    "s1_same_upper": ((2, 2, 4, 5), (2, 2, 3, 2), dict(auto_pad="SAME_UPPER"), True),
    "s1_pointwise": ((2, 3, 3, 3), (3, 2, 1, 1), {}, True),
    "s2_output_padding": ((2, 2, 3, 3), (2, 2, 3, 3),
                          dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), False),
    "s2_groups": ((2, 4, 3, 3), (4, 3, 2, 3), dict(group=2, strides=[2, 1], pads=[1, 0, 0, 1]),
                  False),
    "s2_pointwise": ((3, 4, 3, 3), (4, 5, 1, 1), dict(strides=[2, 2], output_padding=[1, 1]),
                     False),
    "1d_s1": ((2, 2, 5), (2, 3, 3), dict(pads=[1, 0]), True),
    "1d_s2": ((2, 2, 4), (2, 3, 3), dict(strides=[2], pads=[1, 1]), False),
    "3d_s1": ((2, 2, 2, 3, 2), (2, 1, 2, 2, 2), dict(pads=[1, 0, 1, 0, 1, 0]), True),
    "3d_s2": ((2, 2, 2, 3, 2), (2, 1, 2, 2, 2), dict(strides=[2, 1, 2]), False),
}


def _reference(x, w, attrs):
    """The scatter reference with the geometry's explicit pads (it reads no auto_pad)."""
    geom = transpose_geometry(x.shape[2:], w.shape[2:], attrs)
    given = {k: v for k, v in attrs.items() if v is not None and k != "auto_pad"}
    given["pads"] = list(geom.head) + list(geom.tail)
    return conv_transpose_reference([x, w], given)[0]


@pytest.mark.parametrize("path", TRANSPOSE_PATHS)
@pytest.mark.parametrize("name", sorted(TRANSPOSE_CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transpose_formulations_match_the_reference(name, path, dtype):
    x_shape, w_shape, given, flippable = TRANSPOSE_CASES[name]
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    attrs = _attrs(**given)
    expected = _reference(x, w, attrs)
    x, w = x.astype(dtype), w.astype(dtype)
    if path.startswith("flip") and not flippable:
        with pytest.raises(ValueError, match="stride 1"):
            TransposePlan(pt.cpu().backend, _types(x, w), attrs, path=path)
        return
    plan = TransposePlan(pt.cpu().backend, _types(x, w), attrs, path=path)
    y = np.full(expected.shape, np.nan, dtype)
    plan.run(_ctx(), x, w, y)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(y, expected, rtol=tol, atol=tol)


def test_the_kernel_adds_the_bias_and_fills_a_strided_output():
    x, w, b = _rand(2, 4, 5, 5), _rand(4, 3, 3, 3, seed=1), _rand(3, seed=2)
    attrs = _attrs(pads=[1, 1, 1, 1])
    expected = _reference(x, w, attrs) + b.reshape(1, -1, 1, 1)
    backing = np.zeros((2, 3, 5, 10))
    y = backing[..., ::2]  # not contiguous: the kernel computes into scratch and copies
    pt.cpu().backend.kernel("ConvTranspose")(_ctx(), [x, w, b], [y], attrs)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    assert not backing[..., 1::2].any()


@pytest.mark.parametrize("shape, expected", [
    # (batch, C, M, group, kernel, in, out, flippable) -> path (C, M: ConvTranspose's X, Y)
    ((32, 64, 64, 1, (3, 3), (32, 32), (32, 32), True), "flip"),       # ResNet 3x3, stride 1
    ((32, 512, 512, 1, (3, 3), (4, 4), (4, 4), True), "flip_batch"),    # 4x4: batch-wide GEMM
    ((32, 256, 256, 1, (3, 3), (8, 8), (8, 8), True), "flip"),          # 8x8: per image
    ((32, 128, 128, 1, (3, 3), (16, 16), (16, 16), True), "flip"),      # 256: per image
    ((32, 128, 64, 1, (3, 3), (16, 16), (32, 32), False), "scatter"),   # stride 2, 256
    ((32, 512, 256, 1, (3, 3), (4, 4), (8, 8), False), "scatter_batch"),  # stride 2, 4x4
    ((32, 256, 128, 1, (3, 3), (8, 8), (16, 16), False), "scatter_batch"),  # 8x8: still
    ((32, 512, 256, 1, (1, 1), (4, 4), (8, 8), False), "scatter"),      # 1x1: no col2im
    ((32, 64, 64, 1, (1, 1), (32, 32), (32, 32), True), "scatter"),     # 1x1 stride 1 too
    ((64, 50, 20, 1, (5, 5), (8, 8), (12, 12), True), "scatter_batch"),  # LeNet: Y > X
    ((64, 20, 1, 1, (5, 5), (24, 24), (28, 28), True), "scatter_batch"),  # tiny per image
    ((32, 64, 3, 1, (3, 3), (32, 32), (32, 32), True), "scatter"),      # stem: M << C
    ((1, 512, 256, 1, (3, 3), (4, 4), (8, 8), False), "scatter"),       # batch 1
    ((32, 64, 64, 4, (3, 3), (32, 32), (32, 32), True), "flip"),        # groups
])
def test_the_rule_on_its_boundaries(shape, expected):
    batch, c, m, group, kernel, in_shape, out_shape, flippable = shape
    assert conv_grads.transpose_path(batch, c, m, group, kernel, in_shape, out_shape,
                                     flippable) == expected


def test_the_plan_takes_flip_only_where_it_applies():
    backend = pt.cpu().backend
    x, w = np.zeros((32, 64, 16, 16), np.float32), np.zeros((64, 64, 3, 3), np.float32)
    stride1 = TransposePlan(backend, _types(x, w), _attrs(pads=[1, 1, 1, 1]))
    stride2 = TransposePlan(backend, _types(x, w), _attrs(pads=[1, 1, 1, 1], strides=[2, 2],
                                                          output_padding=[1, 1]))
    beyond = TransposePlan(backend, _types(x, w), _attrs(pads=[3, 3, 3, 3]))
    assert stride1.path == "flip" and stride2.path == "scatter" and beyond.path == "scatter"


# name -> (X shape, dY shape, attributes)
GRAD_WEIGHT_CASES = {
    "s1": ((3, 2, 5, 5), (3, 4, 5, 5), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "s2_dilations": ((2, 2, 7, 6), (2, 3, 3, 3),
                     dict(kernel_shape=[3, 2], strides=[2, 2], dilations=[1, 2],
                          pads=[1, 1, 0, 0])),
    "groups": ((2, 4, 4, 4), (2, 6, 2, 2), dict(kernel_shape=[3, 3], group=2)),
    "1d": ((2, 3, 7), (2, 2, 4), dict(kernel_shape=[3], strides=[2], pads=[1, 0])),
    "3d": ((2, 2, 3, 4, 3), (2, 3, 2, 3, 2), dict(kernel_shape=[2, 2, 2])),
}


@pytest.mark.parametrize("name", sorted(GRAD_WEIGHT_CASES))
def test_grad_weight_plan_matches_the_reference(name):
    x_shape, dy_shape, given = GRAD_WEIGHT_CASES[name]
    x, dy = _rand(*x_shape), _rand(*dy_shape, seed=1)
    attrs = _attrs(**given)
    expected = conv_grad_weight_reference([x, dy], given)[0]
    dw = np.full(expected.shape, np.nan)
    GradWeightPlan(pt.cpu().backend, _types(x, dy), attrs).run(_ctx(), x, dy, dw)
    np.testing.assert_allclose(dw, expected, rtol=1e-12, atol=1e-12)


def _conv_reference(x, w, attrs):
    """Conv as the adjoint of the reference ConvTranspose: <Conv(x, w), g> = <x, ConvT(g, w)>
    for every g, so Conv's output element e is <x, ConvT(e_unit, w)>."""
    conv_geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    t_attrs = {k: v for k, v in attrs.items() if v is not None and k != "auto_pad"}
    t_attrs["pads"] = list(conv_geom.head) + list(conv_geom.tail)
    t_attrs["output_padding"] = list(output_padding(conv_geom, x.shape[2:]))
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(conv_geom.out))
    for index in np.ndindex(*y.shape[1:]):
        unit = np.zeros((1,) + y.shape[1:])
        unit[(0,) + index] = 1
        basis = conv_transpose_reference([unit, w], t_attrs)[0][0]  # (C, *in)
        y[(slice(None),) + index] = np.tensordot(x, basis, axes=x.ndim - 1)
    return y


@pytest.mark.parametrize("x_shape, w_shape, given", [
    ((3, 4, 4, 4), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((37, 3, 4, 4), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),  # GEMMs of 16, 16 and 5 images
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 2], dilations=[1, 2],
                                      pads=[1, 0, 1, 1])),
    ((2, 3, 5, 5), (4, 3, 1, 1), dict(strides=[2, 2])),
    ((2, 2, 9), (3, 2, 3), dict(pads=[1, 1])),
    ((2, 2, 2, 3, 2), (3, 2, 2, 2, 2), dict(pads=[1, 0, 1, 0, 1, 0])),
])
def test_batched_conv_matches_the_reference(x_shape, w_shape, given):
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    attrs = _attrs(**given)
    plan = conv_plan.ConvPlan(pt.cpu().backend, _types(x, w), attrs)
    assert plan.batched  # batch > 1, at most BATCH_POSITIONS outputs per image
    expected = _conv_reference(x, w, attrs)
    y = np.full(expected.shape, np.nan)
    plan.forward(_ctx(), x, w, y)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_conv_plan_keeps_per_image_gemms_at_batch_one_and_large_images():
    backend = pt.cpu().backend
    w = np.zeros((8, 4, 3, 3))
    one = conv_plan.ConvPlan(backend, _types(np.zeros((1, 4, 6, 6)), w), _attrs())
    large = conv_plan.ConvPlan(backend, _types(np.zeros((2, 4, 7, 7)), w), _attrs())
    edge = conv_plan.ConvPlan(backend, _types(np.zeros((2, 4, 6, 6)), w), _attrs())
    assert conv_plan.BATCH_POSITIONS == 16
    assert not one.batched and not large.batched and edge.batched  # 4x4 = 16 positions
