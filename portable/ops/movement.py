"""Movement ops: reshaping, transposing, joining, slicing, gathering, padding, shape queries."""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare


def _reshape_infer(ctx):
    shape = [int(d) for d in ctx.value(1)]
    src = ctx.shape(0)
    allowzero = ctx.attrs["allowzero"]
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                ctx.fail(f"shape {shape}: 0 at axis {i} copies an axis the input lacks")
            d = src[i]
        out.append(d)
    total = int(np.prod(src, dtype=np.int64))
    if out.count(-1) > 1:
        ctx.fail(f"shape {shape} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            ctx.fail(f"cannot reshape {src} to {shape}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        ctx.fail(f"cannot reshape {src} ({total} elements) to {tuple(out)}")
    return [TensorType(out, ctx.dtype(0))]


def _reshape_grad(g, dys):
    x = g.inputs[0]
    return [g.emit("Reshape", dys[0], g.const(np.asarray(g.shape(x), np.int64))), None]


declare("Reshape", inputs=("data", "shape"), outputs=("reshaped",), infer=_reshape_infer,
        attrs={"allowzero": Attr("int", 0)}, onnx_since=21, grad=_reshape_grad, view=True,
        nondiff_inputs=(1,))


def _constant_of_shape_infer(ctx):
    shape = [int(d) for d in ctx.value(0)]
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {shape} has a negative dimension")
    value = ctx.attrs["value"]
    dtype = np.float32 if value is None else np.asarray(value).dtype
    return [TensorType(shape, dtype)]


declare("ConstantOfShape", inputs=("input",), outputs=("output",),
        infer=_constant_of_shape_infer, attrs={"value": Attr("tensor", None)}, onnx_since=21)


def _expand_infer(ctx):
    from portable.ops.rules import broadcast_shapes

    target = tuple(int(d) for d in ctx.value(1))
    return [TensorType(broadcast_shapes(ctx, [ctx.shape(0), target]), ctx.dtype(0))]


def _expand_grad(g, dys):
    return [g.sum_to(dys[0], g.inputs[0]), None]


declare("Expand", inputs=("input", "shape"), outputs=("output",), infer=_expand_infer,
        onnx_since=13, grad=_expand_grad, nondiff_inputs=(1,))


def _transpose_infer(ctx):
    shape = ctx.shape(0)
    perm = ctx.attrs["perm"]
    perm = tuple(reversed(range(len(shape)))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(shape))):
        ctx.fail(f"perm {perm} is not a permutation of the {len(shape)} axes")
    return [TensorType([shape[p] for p in perm], ctx.dtype(0))]


def _transpose_grad(g, dys):
    rank = len(g.shape(g.inputs[0]))
    perm = g.attrs["perm"]
    perm = list(reversed(range(rank))) if perm is None else list(perm)
    return [g.emit("Transpose", dys[0], perm=[int(i) for i in np.argsort(perm)])]


declare("Transpose", inputs=("data",), outputs=("transposed",), infer=_transpose_infer,
        attrs={"perm": Attr("ints", None)}, onnx_since=21, grad=_transpose_grad)
