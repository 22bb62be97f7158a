"""Shape-driven ops: Size, DepthToSpace / SpaceToDepth (pixel shuffle), Hardmax, OneHot.

DepthToSpace and SpaceToDepth are one reshape, transpose, reshape each (:func:`shuffle_plan`),
which every backend runs as views and one copy; their gradients are the inverse plan.
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, normalize_axis, require_float


def _size_fold(ctx):
    return [np.asarray(int(np.prod(ctx.shape(0), dtype=np.int64)), np.int64)]


declare("Size", inputs=("data",), outputs=("size",), onnx_since=21, ignored_inputs=(0,),
        infer=lambda ctx: [TensorType((), np.int64)], fold=_size_fold,
        dtype_rule=dtypes_of(np.int64, inputs=()))

# -- DepthToSpace and SpaceToDepth -----------------------------------------------------------


def shuffle_plan(op: str, shape, block: int, mode: str = "DCR"):
    """``(split, perm, merged)``: the output is ``x.reshape(split).transpose(perm)
    .reshape(merged)``, for an (N, C, H, W) input ``shape``."""
    n, c, h, w = shape
    if op == "DepthToSpace":
        depth = c // (block * block)
        if mode == "DCR":
            split, perm = (n, block, block, depth, h, w), (0, 3, 4, 1, 5, 2)
        else:  # CRD
            split, perm = (n, depth, block, block, h, w), (0, 1, 4, 2, 5, 3)
        return split, perm, (n, depth, h * block, w * block)
    split = (n, c, h // block, block, w // block, block)
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)  # (CRD: channels first)
    return split, perm, (n, c * block * block, h // block, w // block)


def _shuffle_infer(ctx):
    shape = ctx.shape(0)
    block = ctx.attrs["blocksize"]
    op = ctx.op.name
    if len(shape) != 4 or block < 1:
        ctx.fail(f"{op} takes an (N, C, H, W) input and blocksize >= 1, got {shape} and "
                 f"{block}")
    if ctx.attrs["mode"] not in ("DCR", "CRD"):
        ctx.fail(f"mode={ctx.attrs['mode']!r} is not DCR or CRD")
    if op == "DepthToSpace":
        if shape[1] % (block * block):
            ctx.fail(f"channels {shape[1]} are not a multiple of blocksize^2 = {block * block}")
    elif shape[2] % block or shape[3] % block:
        ctx.fail(f"height and width {shape[2:]} are not multiples of blocksize {block}")
    _, _, merged = shuffle_plan(op, shape, block, ctx.attrs["mode"])
    return [TensorType(merged, ctx.dtype(0))]


def _shuffle_grad(g, dys):
    """The inverse rearrangement: dy split as the output was merged, transposed back."""
    x = g.inputs[0]
    split, perm, merged = shuffle_plan(g.node.op, g.shape(x), g.attrs["blocksize"],
                                       g.attrs["mode"])
    moved = [split[p] for p in perm]
    back = [perm.index(k) for k in range(len(perm))]
    spread = g.emit("Reshape", dys[0], g.const(np.asarray(moved, np.int64)))
    restored = g.emit("Transpose", spread, perm=back)
    return [g.emit("Reshape", restored, g.const(np.asarray(g.shape(x), np.int64)))]


_SHUFFLE = dict(inputs=("input",), outputs=("output",), infer=_shuffle_infer, onnx_since=28,
                attrs={"blocksize": Attr("int"), "mode": Attr("string", "DCR")},
                grad=_shuffle_grad)
declare("DepthToSpace", **_SHUFFLE)
declare("SpaceToDepth", **_SHUFFLE)  # (mode CRD from opset 28 on)

# -- Hardmax ---------------------------------------------------------------------------------


def _hardmax_infer(ctx):
    require_float(ctx, 0)
    normalize_axis(ctx, ctx.attrs["axis"], len(ctx.shape(0)))
    return [ctx.type(0)]


# 1 at the first largest element along the axis, 0 elsewhere (piecewise constant: no gradient)
declare("Hardmax", inputs=("input",), outputs=("output",), infer=_hardmax_infer,
        attrs={"axis": Attr("int", -1)}, onnx_since=13)

# -- OneHot ----------------------------------------------------------------------------------


def one_hot_depth(value) -> int:
    """OneHot's depth input (a scalar, or one value): a positive count."""
    depth = np.asarray(value).reshape(-1)
    if depth.size != 1 or not depth[0] >= 1:
        raise ValueError(f"depth must be one positive value, got {depth.tolist()}")
    return int(depth[0])


def _one_hot_infer(ctx):
    shape = ctx.shape(0)
    if ctx.dtype(0).kind not in "iuf":
        ctx.fail(f"indices must be numeric, got {ctx.dtype(0).name}")
    if int(np.prod(ctx.shape(2), dtype=np.int64)) != 2:
        ctx.fail(f"values must hold [off, on], got shape {ctx.shape(2)}")
    try:
        depth = one_hot_depth(ctx.value(1))
    except ValueError as exc:
        ctx.fail(str(exc))
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape) + 1)
    return [TensorType(shape[:axis] + (depth,) + shape[axis:], ctx.dtype(2))]


# on where the index (negative ones counted from the end) equals the position along the new
# axis, off elsewhere (indices outside [-depth, depth) give a row of off); no gradient
declare("OneHot", inputs=("indices", "depth", "values"), outputs=("output",),
        infer=_one_hot_infer, attrs={"axis": Attr("int", -1)}, onnx_since=11,
        shape_inputs=(1,), dtype_rule=dtypes_of("data", inputs=(2,)))
