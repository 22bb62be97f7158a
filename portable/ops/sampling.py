"""Sampling ops: GridSample (and its gradient), AffineGrid, DeformConv, RoiAlign, MaxRoiPool
and Col2Im.

Besides the declarations this module holds the host-side geometry every backend shares, all
computed with NumPy from shapes and attributes alone: AffineGrid's homogeneous base grid,
Col2Im's and DeformConv's window geometry (``portable.ops.conv.Geometry``), and the parsed
attributes of GridSample and RoiAlign. The sampling itself (coordinates that depend on data)
is backend code.

Gradients: GridSample w.r.t. X and grid (``portable.GridSampleGrad``), AffineGrid w.r.t. theta
(a MatMul with the base grid) and Col2Im (its adjoint is im2col: a Conv with a one-hot
kernel). DeformConv, RoiAlign and MaxRoiPool are not differentiable here.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.conv import Geometry, window_attrs, window_geometry
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, require_float, same_dtype

GRID_MODES = ("linear", "nearest", "cubic")
GRID_PADDINGS = ("zeros", "border", "reflection")
# The Keys cubic convolution coefficient GridSample uses (as PyTorch's grid_sample does).
CUBIC_A = -0.75


def _choice(ctx, name: str, choices: Sequence[str]) -> None:
    if ctx.attrs[name] not in choices:
        ctx.fail(f"{name}={ctx.attrs[name]!r} is not one of {list(choices)}")


def _known(a, b) -> bool:
    """Whether two dims are both static and differ."""
    return a is not None and b is not None and a != b


# -- GridSample ----------------------------------------------------------------------------------


def _grid_sample_infer(ctx):
    _choice(ctx, "mode", GRID_MODES)
    _choice(ctx, "padding_mode", GRID_PADDINGS)
    x, grid = ctx.shape(0), ctx.shape(1)
    require_float(ctx, 0)
    require_float(ctx, 1)
    if len(x) < 3:
        ctx.fail(f"X must be (N, C, D1, ..., Dr) with r >= 1 spatial axes, got {x}")
    rank = len(x) - 2
    if len(grid) != rank + 2 or grid[-1] != rank:
        ctx.fail(f"grid must be (N, D1_out, ..., Dr_out, {rank}) for X of shape {x}, got {grid}")
    if _known(x[0], grid[0]):
        ctx.fail(f"X has batch {x[0]} but grid has batch {grid[0]}")
    return [TensorType(tuple(x[:2]) + tuple(grid[1:-1]), ctx.dtype(0))]


def _grid_sample_grad_infer(ctx):
    dy, x, grid = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(dy) != len(x) or tuple(dy[2:]) != tuple(grid[1:-1]):
        ctx.fail(f"dY has shape {dy}; GridSample of X {x} on grid {grid} gives "
                 f"{tuple(x[:2]) + tuple(grid[1:-1])}")
    return [ctx.type(1), ctx.type(2)]


def _grid_sample_grad(g, dys):
    x, grid = g.inputs
    dx, dgrid = g.emit("portable.GridSampleGrad", dys[0], x, grid, num_outputs=2, **g.attrs)
    return [dx, dgrid]


_GRID_ATTRS = {"mode": Attr("string", "linear"), "padding_mode": Attr("string", "zeros"),
               "align_corners": Attr("int", 0)}

declare("GridSample", inputs=("X", "grid"), outputs=("Y",), infer=_grid_sample_infer,
        attrs=_GRID_ATTRS, onnx_since=22, grad=_grid_sample_grad,
        dtype_rule=dtypes_of(0, inputs=(0,)))
declare("GridSampleGrad", domain="portable", inputs=("dY", "X", "grid"), outputs=("dX", "dgrid"),
        infer=_grid_sample_grad_infer, attrs=_GRID_ATTRS,
        dtype_rule=dtypes_of(1, 2, inputs=(0, 1)),
        doc="GridSample's gradients: dX scatters dY by the interpolation weights; dgrid is dY "
            "times the weights' derivative along each axis (zero for nearest).")

# -- AffineGrid ----------------------------------------------------------------------------------


def affine_base_grid(spatial: Sequence[int], align_corners: bool) -> np.ndarray:
    """The homogeneous base grid (prod(spatial), r + 1), float64: per output position its
    normalised coordinates in reversed axis order (x, y[, z]) and a trailing 1, as
    onnx.reference's AffineGrid builds it."""
    axes = []
    for size in spatial:
        i = np.arange(size, dtype=np.float64)
        if align_corners:
            axes.append(-1 + 2 * i / (size - 1) if size > 1 else np.full(size, -1.0))
        else:
            axes.append((2 * i + 1) / size - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    columns = [m.reshape(-1) for m in reversed(mesh)]
    columns.append(np.ones(math.prod(spatial)))
    return np.stack(columns, axis=1)


def _affine_size(ctx) -> list[int]:
    size = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
    if len(size) not in (4, 5) or any(v < 1 for v in size):
        ctx.fail(f"size must be (N, C, H, W) or (N, C, D, H, W) with positive values, got {size}")
    return size


def _affine_grid_infer(ctx):
    require_float(ctx, 0)
    size = _affine_size(ctx)
    rank = len(size) - 2
    theta = ctx.shape(0)
    if len(theta) != 3 or tuple(theta[1:]) != (rank, rank + 1) or _known(theta[0], size[0]):
        ctx.fail(f"theta must be ({size[0]}, {rank}, {rank + 1}) for size {size}, got {theta}")
    return [TensorType(tuple(size[:1]) + tuple(size[2:]) + (rank,), ctx.dtype(0))]


def _affine_grid_grad(g, dys):
    """grid (N, P, r) = base (P, r + 1) @ theta^T, so dtheta = dgrid^T (N, r, P) @ base."""
    theta, size = g.inputs
    spatial = [int(v) for v in np.asarray(g.value(size)).reshape(-1)][2:]
    base = affine_base_grid(spatial, bool(g.attrs["align_corners"])).astype(g.dtype(theta))
    n, rank = g.shape(theta)[0], len(spatial)
    flat = g.emit("Reshape", dys[0], g.const(np.asarray([n, -1, rank], np.int64)))
    return [g.emit("MatMul", g.emit("Transpose", flat, perm=[0, 2, 1]), g.const(base)), None]


declare("AffineGrid", inputs=("theta", "size"), outputs=("grid",), infer=_affine_grid_infer,
        attrs={"align_corners": Attr("int", 0)}, onnx_since=20, grad=_affine_grid_grad,
        nondiff_inputs=(1,), shape_inputs=(1,))

# -- Col2Im --------------------------------------------------------------------------------------


def col2im_geometry(image: Sequence[int], block: Sequence[int],
                    attrs: Mapping[str, Any]) -> Geometry:
    """The windows of Col2Im: ``block`` sliding over ``image``; ``out`` is the number of
    blocks along each axis. Raises ValueError for inconsistent values."""
    image, block = [int(v) for v in image], [int(v) for v in block]
    if len(image) != len(block) or not image or min(image + block) < 1:
        raise ValueError(f"image_shape {image} and block_shape {block} must be positive and "
                         f"of one length")
    strides, dilations, head, tail, _ = window_attrs(attrs, block)
    blocks = []
    for n, k, s, d, h, t in zip(image, block, strides, dilations, head, tail):
        count = (n + h + t - (d * (k - 1) + 1)) // s + 1
        if count < 1:
            raise ValueError(f"image_shape {image} with pads {list(head + tail)} is smaller "
                             f"than one block {block} (dilations {list(dilations)})")
        blocks.append(count)
    return Geometry(tuple(block), strides, dilations, head, tail, tuple(blocks))


def _col2im_infer(ctx):
    x = ctx.shape(0)
    image = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.value(2)).reshape(-1)]
    try:
        geom = col2im_geometry(image, block, ctx.attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    if len(x) != 3:
        ctx.fail(f"input must be (N, C * prod(block_shape), L), got {x}")
    k = math.prod(block)
    if x[1] is not None and x[1] % k:
        ctx.fail(f"input's dim 1 ({x[1]}) is not a multiple of prod(block_shape) = {k}")
    if _known(x[2], math.prod(geom.out)):
        ctx.fail(f"input has {x[2]} blocks but image_shape {image} holds {list(geom.out)} = "
                 f"{math.prod(geom.out)}")
    channels = None if x[1] is None else x[1] // k
    return [TensorType((x[0], channels) + tuple(image), ctx.dtype(0))]


def _col2im_grad(g, dys):
    """Col2Im's adjoint is im2col: a Conv of each (image, channel) plane with a one-hot kernel
    per block offset gives the (N, C * K, L) columns."""
    x, image, block = g.inputs
    block_shape = [int(v) for v in np.asarray(g.value(block)).reshape(-1)]
    image_shape = [int(v) for v in np.asarray(g.value(image)).reshape(-1)]
    k = math.prod(block_shape)
    n, ck, count = g.shape(x)
    planes = g.emit("Reshape", dys[0], g.const(np.asarray([-1, 1] + image_shape, np.int64)))
    one_hot = np.eye(k, dtype=g.dtype(x)).reshape([k, 1] + block_shape)
    attrs = {key: list(g.attrs[key]) for key in ("strides", "dilations", "pads")
             if g.attrs[key] is not None}
    cols = g.emit("Conv", planes, g.const(one_hot), **attrs)
    return [g.emit("Reshape", cols, g.const(np.asarray([n, ck, count], np.int64))), None, None]


declare("Col2Im", inputs=("input", "image_shape", "block_shape"), outputs=("output",),
        infer=_col2im_infer, onnx_since=18, grad=_col2im_grad, nondiff_inputs=(1, 2),
        shape_inputs=(1, 2),
        attrs={"dilations": Attr("ints", None), "pads": Attr("ints", None),
               "strides": Attr("ints", None)})

# -- DeformConv ----------------------------------------------------------------------------------


def deform_geometry(in_shape: Sequence[int], kernel: Sequence[int],
                    attrs: Mapping[str, Any]) -> Geometry:
    """DeformConv's windows (Conv's, without auto_pad); raises ValueError when bad."""
    return window_geometry(in_shape, kernel, {k: v for k, v in attrs.items()
                                              if k in ("strides", "dilations", "pads")})


def _deform_conv_infer(ctx):
    for i in range(5):
        if ctx.has(i):
            require_float(ctx, i)
    dtype = same_dtype(ctx, [i for i in range(5) if ctx.has(i)])
    x, w, offset = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    group, offset_group = ctx.attrs["group"], ctx.attrs["offset_group"]
    if len(x) < 3 or len(w) != len(x) or len(offset) != len(x):
        ctx.fail(f"X {x}, W {w} and offset {offset} must all be (N, C, D1, ..., Dr)")
    kernel = tuple(w[2:])
    if ctx.attrs["kernel_shape"] is not None and tuple(ctx.attrs["kernel_shape"]) != kernel:
        ctx.fail(f"kernel_shape={list(ctx.attrs['kernel_shape'])} differs from W's {kernel}")
    if any(d is None for d in (x[1],) + tuple(w)):
        ctx.fail(f"X's channels and W's shape must be static, got X {x} and W {w}")
    if group < 1 or offset_group < 1 or w[0] % group or x[1] != w[1] * group:
        ctx.fail(f"X has {x[1]} channels and W is {w}: need C = W.shape[1] * group "
                 f"(group={group}) and M divisible by group")
    if x[1] % offset_group:
        ctx.fail(f"X's {x[1]} channels are not divisible by offset_group={offset_group}")
    try:
        geom = deform_geometry(x[2:], kernel, ctx.attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    k = math.prod(kernel)
    out = (x[0],) + tuple(geom.out)
    if any(_known(a, b) for a, b in zip(offset, (x[0], offset_group * k * len(kernel))
                                        + tuple(geom.out))):
        ctx.fail(f"offset must be {(x[0], offset_group * k * len(kernel)) + tuple(geom.out)} "
                 f"(N, offset_group * prod(kernel) * r, *out), got {offset}")
    if ctx.has(3) and tuple(ctx.shape(3)) != (w[0],):
        ctx.fail(f"B must be ({w[0]},), got {ctx.shape(3)}")
    if ctx.has(4) and (len(ctx.shape(4)) != len(x) or any(
            _known(a, b) for a, b in zip(ctx.shape(4), (x[0], offset_group * k) + geom.out))):
        ctx.fail(f"mask must be {(x[0], offset_group * k) + tuple(geom.out)}, got "
                 f"{ctx.shape(4)}")
    return [TensorType((out[0], w[0]) + out[1:], dtype)]


declare("DeformConv", inputs=("X", "W", "offset", "B?", "mask?"), outputs=("Y",),
        infer=_deform_conv_infer, onnx_since=22,
        attrs={"dilations": Attr("ints", None), "group": Attr("int", 1),
               "kernel_shape": Attr("ints", None), "offset_group": Attr("int", 1),
               "pads": Attr("ints", None), "strides": Attr("ints", None)})

# -- RoiAlign and MaxRoiPool ---------------------------------------------------------------------


def _rois_infer(ctx, columns: int, what: str) -> tuple[int | None, ...]:
    x, rois = ctx.shape(0), ctx.shape(1)
    require_float(ctx, 0)
    if len(x) != 4:
        ctx.fail(f"X must be (N, C, H, W), got {x}")
    if len(rois) != 2 or _known(rois[1], columns):
        ctx.fail(f"rois must be (num_rois, {columns}) {what}, got {rois}")
    same_dtype(ctx, (0, 1))
    return rois


def _roi_align_infer(ctx):
    _choice(ctx, "mode", ("avg", "max"))
    _choice(ctx, "coordinate_transformation_mode", ("half_pixel", "output_half_pixel"))
    rois = _rois_infer(ctx, 4, "[x1, y1, x2, y2]")
    index = ctx.shape(2)
    if ctx.dtype(2).kind not in "iu" or len(index) != 1 or _known(index[0], rois[0]):
        ctx.fail(f"batch_indices must be integers of shape ({rois[0]},), got {ctx.type(2)!r}")
    height, width = ctx.attrs["output_height"], ctx.attrs["output_width"]
    if height < 1 or width < 1:
        ctx.fail(f"output_height={height} and output_width={width} must be positive")
    return [TensorType((rois[0], ctx.shape(0)[1], height, width), ctx.dtype(0))]


declare("RoiAlign", inputs=("X", "rois", "batch_indices"), outputs=("Y",),
        infer=_roi_align_infer, onnx_since=22, nondiff_inputs=(2,),
        attrs={"coordinate_transformation_mode": Attr("string", "half_pixel"),
               "mode": Attr("string", "avg"), "output_height": Attr("int", 1),
               "output_width": Attr("int", 1), "sampling_ratio": Attr("int", 0),
               "spatial_scale": Attr("float", 1.0)})


def _max_roi_pool_infer(ctx):
    rois = _rois_infer(ctx, 5, "[batch_index, x1, y1, x2, y2]")
    pooled = [int(v) for v in ctx.attrs["pooled_shape"]]
    if len(pooled) != 2 or min(pooled) < 1:
        ctx.fail(f"pooled_shape={pooled} must be two positive values (height, width)")
    return [TensorType((rois[0], ctx.shape(0)[1]) + tuple(pooled), ctx.dtype(0))]


declare("MaxRoiPool", inputs=("X", "rois"), outputs=("Y",), infer=_max_roi_pool_infer,
        onnx_since=22, attrs={"pooled_shape": Attr("ints"), "spatial_scale": Attr("float", 1.0)})
