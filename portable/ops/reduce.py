"""Reduction ops: ReduceSum/Mean/Max/Min (axes as an input, the ONNX opset 18 form),
ArgMax/ArgMin."""
from __future__ import annotations

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare


def reduced_axes(rank: int, axes: np.ndarray | None, noop_with_empty_axes: int) -> tuple[int, ...]:
    """The axes a Reduce* op reduces over: all of them when ``axes`` is absent or empty
    (unless ``noop_with_empty_axes``). Raises ValueError on an out-of-range or repeated axis."""
    if axes is None or np.asarray(axes).size == 0:
        return () if noop_with_empty_axes else tuple(range(rank))
    result = []
    for axis in np.asarray(axes).reshape(-1).tolist():
        if not -rank <= axis < rank:
            raise ValueError(f"axis {axis} is out of range for rank {rank}")
        result.append(axis % rank)
    if len(set(result)) != len(result):
        raise ValueError(f"axes {result} repeat an axis")
    return tuple(sorted(result))


def _node_axes(ctx) -> tuple[int, ...]:
    try:
        return reduced_axes(len(ctx.shape(0)), ctx.value(1) if ctx.has(1) else None,
                            ctx.attrs["noop_with_empty_axes"])
    except ValueError as exc:
        ctx.fail(str(exc))


def _reduce_infer(ctx):
    axes = _node_axes(ctx)
    shape = ctx.shape(0)
    if ctx.attrs["keepdims"]:
        out = [1 if i in axes else d for i, d in enumerate(shape)]
    else:
        out = [d for i, d in enumerate(shape) if i not in axes]
    return [TensorType(out, ctx.dtype(0))]


def grad_axes(g) -> tuple[int, ...]:
    """The reduced axes as seen from a gradient rule."""
    axes = g.inputs[1] if len(g.inputs) > 1 and g.inputs[1] is not None else None
    return reduced_axes(len(g.shape(g.inputs[0])), None if axes is None else g.value(axes),
                        g.attrs["noop_with_empty_axes"])


def broadcast_back(g, dy):
    """Spread a reduction's output gradient back over the input's shape."""
    x = g.inputs[0]
    axes = grad_axes(g)
    kept = [1 if i in axes else d for i, d in enumerate(g.shape(x))]
    dy = g.emit("Reshape", dy, g.const(np.asarray(kept, np.int64)))
    return g.emit("Expand", dy, g.const(np.asarray(g.shape(x), np.int64)))


def _reduce_sum_grad(g, dys):
    return [broadcast_back(g, dys[0]), None]


REDUCE = dict(inputs=("data", "axes?"), outputs=("reduced",), infer=_reduce_infer,
              attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
              nondiff_inputs=(1,), fusion="reduce")

declare("ReduceSum", onnx_since=13, grad=_reduce_sum_grad, **REDUCE)
