"""Reduction ops: ReduceSum/Mean/Max/Min (axes as an input, the ONNX opset 18 form),
ArgMax/ArgMin, TopK, CumSum and CumProd."""
from __future__ import annotations

import functools

import numpy as np

from portable.dtypes import to_onnx
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, normalize_axis


def reduced_axes(rank: int, axes: np.ndarray | None, noop_with_empty_axes: int) -> tuple[int, ...]:
    """The axes a Reduce* op reduces over: all of them when ``axes`` is absent or empty
    (unless ``noop_with_empty_axes``). Raises ValueError on an out-of-range or repeated axis."""
    axes = () if axes is None else tuple(np.asarray(axes).ravel().tolist())
    return _reduced_axes(rank, axes, bool(noop_with_empty_axes))


@functools.lru_cache(maxsize=1024)
def _reduced_axes(rank, axes, noop_with_empty_axes):
    # Cached: kernels call this on every run with the same constant axes.
    if not axes:
        return () if noop_with_empty_axes else tuple(range(rank))
    if any(not -rank <= axis < rank for axis in axes):
        raise ValueError(f"axes {list(axes)} are out of range for rank {rank}")
    result = tuple(sorted(axis % rank for axis in axes))
    if len(set(result)) != len(result):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return result


def kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[int]:
    """The shape of a reduction with ``keepdims=1``."""
    return [1 if i in axes else d for i, d in enumerate(shape)]


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
        out = kept_shape(shape, axes)
    else:
        out = [d for i, d in enumerate(shape) if i not in axes]
    return [TensorType(out, ctx.dtype(0))]


def grad_axes(g) -> tuple[int, ...]:
    """The reduced axes as seen from a gradient rule."""
    axes = g.inputs[1] if len(g.inputs) > 1 and g.inputs[1] is not None else None
    return reduced_axes(len(g.shape(g.inputs[0])), None if axes is None else g.value(axes),
                        g.attrs["noop_with_empty_axes"])


def _keep_dims(g, y, axes):
    """``y`` (a reduction's output or its gradient) reshaped to the keepdims shape, so that it
    broadcasts against the input."""
    kept = kept_shape(g.shape(g.inputs[0]), axes)
    return g.emit("Reshape", y, g.const(np.asarray(kept, np.int64)))


def broadcast_back(g, dy):
    """Spread a reduction's output gradient back over the input's shape."""
    x = g.inputs[0]
    dy = _keep_dims(g, dy, grad_axes(g))
    return g.emit("Expand", dy, g.const(np.asarray(g.shape(x), np.int64)))


def _reduce_sum_grad(g, dys):
    return [broadcast_back(g, dys[0]), None]


def _reduce_mean_grad(g, dys):
    shape = g.shape(g.inputs[0])
    count = int(np.prod([shape[a] for a in grad_axes(g)], dtype=np.int64))
    dy = dys[0]
    if count > 1:
        # Scale before spreading: the output has fewer elements than the input.
        dy = g.emit("Mul", dy, g.scalar(1.0 / count, dy))
    return [broadcast_back(g, dy), None]


def _extremum_grad(g, dys):
    """ReduceMax/ReduceMin: the gradient flows to the extreme element(s); tied extremes share
    it equally, so the total stays dy (what finite differences give without ties)."""
    x, y = g.inputs[0], g.outputs[0]
    axes = grad_axes(g)
    if not axes:
        return [dys[0], None]
    hits = g.emit("Cast", g.emit("Equal", x, _keep_dims(g, y, axes)),
                  to=to_onnx(g.dtype(x)))
    ties = g.emit("ReduceSum", hits, g.const(np.asarray(axes, np.int64)), keepdims=1)
    share = g.emit("Div", _keep_dims(g, dys[0], axes), ties)
    return [g.emit("Mul", hits, share), None]


REDUCE = dict(inputs=("data", "axes?"), outputs=("reduced",), infer=_reduce_infer,
              attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
              nondiff_inputs=(1,), fusion="reduce")

declare("ReduceSum", onnx_since=13, grad=_reduce_sum_grad, **REDUCE)
declare("ReduceMean", onnx_since=18, grad=_reduce_mean_grad, **REDUCE)
declare("ReduceMax", onnx_since=20, grad=_extremum_grad, **REDUCE)
declare("ReduceMin", onnx_since=20, grad=_extremum_grad, **REDUCE)

# -- norms, products and log-sum-exp: an elementwise step, then a sum or a product ------------
# (with noop_with_empty_axes and no axes the elementwise step still applies, as in ONNX)


def _float_reduce_infer(ctx):
    if ctx.dtype(0).kind != "f":
        ctx.fail(f"data must be a float tensor, got {ctx.dtype(0).name}")
    return _reduce_infer(ctx)


def _axes_const(g, axes):
    return g.const(np.asarray(axes, np.int64))


def _sum_square_grad(g, dys):
    x = g.inputs[0]
    return [g.emit("Mul", broadcast_back(g, dys[0]), g.emit("Add", x, x)), None]


def _l1_grad(g, dys):
    x = g.inputs[0]
    dtype = to_onnx(g.dtype(x))
    sign = g.emit("Sub", g.emit("Cast", g.emit("Greater", x, g.scalar(0.0, x)), to=dtype),
                  g.emit("Cast", g.emit("Less", x, g.scalar(0.0, x)), to=dtype))
    return [g.emit("Mul", broadcast_back(g, dys[0]), sign), None]


def _l2_grad(g, dys):
    """x / y: undefined where the norm is 0, as the norm's derivative is."""
    x, y = g.inputs[0], g.outputs[0]
    return [g.emit("Mul", x, broadcast_back(g, g.emit("Div", dys[0], y))), None]


def _log_sum_exp_grad(g, dys):
    x, y = g.inputs[0], g.outputs[0]
    softmax = g.emit("Exp", g.emit("Sub", x, _keep_dims(g, y, grad_axes(g))))
    return [g.emit("Mul", softmax, broadcast_back(g, dys[0])), None]


def _prod_grad(g, dys):
    """The product of the other elements: y / x where x != 0; where x == 0, the product of
    the non-zero ones if it is the slice's only zero, else 0."""
    x, y = g.inputs[0], g.outputs[0]
    axes = grad_axes(g)
    if not axes:
        return [dys[0], None]
    zero = g.emit("Equal", x, g.scalar(0.0, x))
    safe = g.emit("Where", zero, g.scalar(1.0, x), x)
    others = g.emit("ReduceProd", safe, _axes_const(g, axes), keepdims=1)
    zeros = g.emit("ReduceSum", g.emit("Cast", zero, to=to_onnx(g.dtype(x))),
                   _axes_const(g, axes), keepdims=1)
    lone = g.emit("Where", g.emit("Equal", zeros, g.scalar(1.0, x)), others, g.scalar(0.0, x))
    partial = g.emit("Where", zero, lone, g.emit("Div", _keep_dims(g, y, axes), safe))
    return [g.emit("Mul", partial, broadcast_back(g, dys[0])), None]


declare("ReduceSumSquare", onnx_since=18, grad=_sum_square_grad, **REDUCE)
declare("ReduceL1", onnx_since=18, grad=_l1_grad, **REDUCE)
declare("ReduceProd", onnx_since=18, grad=_prod_grad, **REDUCE)
declare("ReduceL2", onnx_since=18, grad=_l2_grad, **{**REDUCE, "infer": _float_reduce_infer})
declare("ReduceLogSumExp", onnx_since=18, grad=_log_sum_exp_grad,
        **{**REDUCE, "infer": _float_reduce_infer})
declare("ReduceLogSum", onnx_since=18,  # d log(s) = ds / s, and s = exp(y)
        grad=lambda g, dys: [broadcast_back(
            g, g.emit("Div", dys[0], g.emit("Exp", g.outputs[0]))), None],
        **{**REDUCE, "infer": _float_reduce_infer})


def _arg_infer(ctx):
    shape = ctx.shape(0)
    if not shape:
        ctx.fail("data must have rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    if shape[axis] == 0:
        ctx.fail(f"axis {axis} is empty: there is no extreme element to index")
    if ctx.attrs["keepdims"]:
        out = kept_shape(shape, (axis,))
    else:
        out = [d for i, d in enumerate(shape) if i != axis]
    return [TensorType(out, np.int64)]


ARG = dict(inputs=("data",), outputs=("reduced",), infer=_arg_infer, onnx_since=13,
           attrs={"axis": Attr("int", 0), "keepdims": Attr("int", 1),
                  "select_last_index": Attr("int", 0)}, dtype_rule=dtypes_of(np.int64, inputs=()))

declare("ArgMax", **ARG)
declare("ArgMin", **ARG)

# -- TopK ------------------------------------------------------------------------------------


def _topk_infer(ctx):
    shape = ctx.shape(0)
    if not shape:
        ctx.fail("X must have rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(shape))
    given = np.asarray(ctx.value(1)).reshape(-1)
    if given.size != 1 or given.dtype.kind not in "iu":
        ctx.fail(f"K must be one integer, got {given.tolist()} ({given.dtype})")
    k = int(given[0])
    if not 0 <= k <= shape[axis]:
        ctx.fail(f"K={k} must lie in [0, {shape[axis]}], the length of axis {axis}")
    out = list(shape)
    out[axis] = k
    return [TensorType(out, ctx.dtype(0)), TensorType(out, np.int64)]


def _topk_grad(g, dys):
    """Each selected element gets its value's gradient; the others get zero (the values are
    GatherElements of the indices, so the gradient is its scatter-add)."""
    if dys[0] is None:
        return [None, None]
    x = g.inputs[0]
    return [g.emit("portable.GatherElementsGrad", dys[0], g.outputs[1],
                   axis=g.attrs["axis"] % len(g.shape(x)), shape=list(g.shape(x))), None]


declare("TopK", inputs=("X", "K"), outputs=("Values", "Indices"), infer=_topk_infer,
        attrs={"axis": Attr("int", -1), "largest": Attr("int", 1), "sorted": Attr("int", 1)},
        onnx_since=11, grad=_topk_grad, nondiff_inputs=(1,), dtype_rule=dtypes_of("data", np.int64))


def topk_order_key(x: np.ndarray, largest: bool) -> np.ndarray:
    """A key whose stable ascending sort gives TopK's order: the largest (or smallest) first,
    ties in index order. Bitwise NOT reverses integers with no overflow."""
    if not largest:
        return x
    return -x if x.dtype.kind == "f" else ~x

# -- CumSum and CumProd ----------------------------------------------------------------------


def cumsum_axis(value, rank: int) -> int:
    """The scan's axis (CumSum's and CumProd's second input, a scalar), non-negative."""
    axis = int(np.asarray(value).reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _scan_infer(ctx):
    shape = ctx.shape(0)
    if not shape:
        ctx.fail("x must have rank >= 1")
    if ctx.dtype(1).kind not in "iu" or int(np.prod(ctx.shape(1), dtype=np.int64)) != 1:
        ctx.fail(f"axis must be one integer, got {ctx.dtype(1).name}{list(ctx.shape(1))}")
    if ctx.known(1):
        try:
            cumsum_axis(ctx.value(1), len(shape))
        except ValueError as exc:
            ctx.fail(str(exc))
    return [TensorType(shape, ctx.dtype(0))]


def _cumsum_grad(g, dys):
    """Each input adds to the sums after it (before it, reversed): the gradient is the
    cumulative sum of dy the other way, with the same exclusivity."""
    return [g.emit("CumSum", dys[0], g.inputs[1], exclusive=g.attrs["exclusive"],
                   reverse=1 - g.attrs["reverse"]), None]


_SCAN = dict(inputs=("x", "axis"), outputs=("y",), infer=_scan_infer, nondiff_inputs=(1,),
             attrs={"exclusive": Attr("int", 0), "reverse": Attr("int", 0)})
declare("CumSum", onnx_since=14, grad=_cumsum_grad, **_SCAN)
# (not differentiable: its gradient needs the products of the others, zeros included)
declare("CumProd", onnx_since=26, **_SCAN)
