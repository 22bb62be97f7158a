"""Ops indexed element by element along one axis: GatherElements (PyTorch's ``gather``), its
gradient (a scatter-add that TopK's gradient shares), ScatterElements (``scatter_``) and
ScatterND (``index_put``), which every backend runs as ScatterElements on a 2-D view.

Indices have the data's rank; along ``axis`` they pick a position (negative ones count from
the end, once), and along every other axis they stay where they are, so the output has the
indices' shape. ONNX lets the indices be shorter than the data on the other axes: only that
leading block of the data is read (and receives gradient).
"""
from __future__ import annotations

import numpy as np

from portable.errors import NotDifferentiableError
from portable.ir.graph import TensorType
from portable.ops.movement import INDEX_DTYPES
from portable.ops.registry import Attr, declare
from portable.ops.rules import normalize_axis


def read_block(indices_shape, axis: int) -> tuple[slice, ...]:
    """The block of the data that indices of ``indices_shape`` can reach: all of ``axis``,
    the indices' extent on every other axis."""
    return tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(indices_shape))


def _check(ctx, data_shape, axis_attr):
    indices = ctx.type(1)
    if indices.dtype not in INDEX_DTYPES:
        ctx.fail(f"indices must be int32 or int64, got {indices.dtype.name}")
    if len(indices.shape) != len(data_shape) or not data_shape:
        ctx.fail(f"indices {indices.shape} must have the data's rank {len(data_shape)} (>= 1)")
    axis = normalize_axis(ctx, axis_attr, len(data_shape))
    if any(n > d for k, (n, d) in enumerate(zip(indices.shape, data_shape)) if k != axis):
        ctx.fail(f"indices {indices.shape} exceed the data {tuple(data_shape)} off axis {axis}")
    return axis


def _gather_elements_infer(ctx):
    _check(ctx, ctx.shape(0), ctx.attrs["axis"])
    return [TensorType(ctx.shape(1), ctx.dtype(0))]


def _gather_elements_grad(g, dys):
    data, indices = g.inputs
    return [g.emit("portable.GatherElementsGrad", dys[0], indices, axis=g.attrs["axis"],
                   shape=list(g.shape(data))), None]


declare("GatherElements", inputs=("data", "indices"), outputs=("output",),
        infer=_gather_elements_infer, attrs={"axis": Attr("int", 0)}, onnx_since=13,
        grad=_gather_elements_grad, nondiff_inputs=(1,))


def _scatter_infer(ctx):
    shape = tuple(ctx.attrs["shape"])
    _check(ctx, shape, ctx.attrs["axis"])
    if ctx.shape(0) != ctx.shape(1):
        ctx.fail(f"dy {ctx.shape(0)} and indices {ctx.shape(1)} must have one shape")
    return [TensorType(shape, ctx.dtype(0))]


def _scatter_grad(g, dys):
    return [g.emit("GatherElements", dys[0], g.inputs[1], axis=g.attrs["axis"]), None]


declare("GatherElementsGrad", domain="portable", inputs=("dy", "indices"), outputs=("dx",),
        infer=_scatter_infer, attrs={"axis": Attr("int", 0), "shape": Attr("ints")},
        grad=_scatter_grad, nondiff_inputs=(1,),
        doc="Zeros of `shape` with dy added at GatherElements' indices (repeats accumulate).")

# -- ScatterElements -------------------------------------------------------------------------

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter_elements_infer(ctx):
    _check(ctx, ctx.shape(0), ctx.attrs["axis"])
    if ctx.shape(2) != ctx.shape(1) or ctx.dtype(2) != ctx.dtype(0):
        ctx.fail(f"updates {ctx.type(2)!r} must have the indices' shape {ctx.shape(1)} and the "
                 f"data's dtype {ctx.dtype(0).name}")
    if ctx.attrs["reduction"] not in REDUCTIONS:
        ctx.fail(f"reduction={ctx.attrs['reduction']!r} is not one of {list(REDUCTIONS)}")
    return [ctx.type(0)]


def _scatter_elements_grad(g, dys):
    """none: the data's gradient without the overwritten places, the updates' gathered (a
    position written twice gives both writers the gradient, as PyTorch does); add: dy to both."""
    data, indices, _ = g.inputs
    reduction, axis = g.attrs["reduction"], g.attrs["axis"]
    if reduction not in ("none", "add"):
        raise NotDifferentiableError(f"node {g.node.name!r} (op ScatterElements): no gradient "
                                     f"for reduction={reduction!r}")
    d_updates = g.emit("GatherElements", dys[0], indices, axis=axis)
    if reduction == "add":
        return [dys[0], None, d_updates]
    ones = g.emit("ConstantOfShape", g.const(np.asarray(g.shape(indices), np.int64)),
                  value=np.ones(1, g.dtype(dys[0])))
    hit = g.emit("portable.GatherElementsGrad", ones, indices, axis=axis,
                 shape=list(g.shape(data)))
    kept = g.emit("Where", g.emit("Greater", hit, g.scalar(0.0, hit)), g.scalar(0.0, dys[0]),
                  dys[0])
    return [kept, None, d_updates]


declare("ScatterElements", inputs=("data", "indices", "updates"), outputs=("output",),
        infer=_scatter_elements_infer, onnx_since=18, grad=_scatter_elements_grad,
        attrs={"axis": Attr("int", 0), "reduction": Attr("string", "none")},
        nondiff_inputs=(1,))

# -- ScatterND -------------------------------------------------------------------------------


def nd_rows(xp, indices, leading) -> "np.ndarray":
    """The rows of the data viewed as (prod(leading), rest) that ScatterND's index tuples
    (the last axis of ``indices``) address; negative entries count from the end."""
    leading = tuple(int(d) for d in leading)
    tuples = int(np.prod(indices.shape[:-1], dtype=np.int64))
    flat = indices.reshape(tuples, len(leading)).astype(np.int64)
    bounds = xp.asarray(np.asarray(leading, np.int64))
    if flat.size and bool(((flat < -bounds) | (flat >= bounds)).any()):
        raise IndexError(f"an index tuple reaches outside {list(leading)}")
    flat = xp.where(flat < 0, flat + bounds, flat)
    strides = np.cumprod((1,) + leading[:0:-1])[::-1].astype(np.int64)
    return (flat * xp.asarray(strides)).sum(axis=1) if leading else xp.zeros(tuples, np.int64)


def _scatter_nd_infer(ctx):
    data, indices, updates = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if ctx.dtype(1) not in INDEX_DTYPES:
        ctx.fail(f"indices must be int32 or int64, got {ctx.dtype(1).name}")
    if not indices or indices[-1] > len(data):
        ctx.fail(f"indices {indices} must end in a tuple length <= the data's rank {len(data)}")
    expected = indices[:-1] + data[indices[-1]:]
    if updates != expected or ctx.dtype(2) != ctx.dtype(0):
        ctx.fail(f"updates {ctx.type(2)!r} must have shape {expected} and dtype "
                 f"{ctx.dtype(0).name}")
    if ctx.attrs["reduction"] not in REDUCTIONS:
        ctx.fail(f"reduction={ctx.attrs['reduction']!r} is not one of {list(REDUCTIONS)}")
    return [ctx.type(0)]


# (no gradient yet)
declare("ScatterND", inputs=("data", "indices", "updates"), outputs=("output",),
        infer=_scatter_nd_infer, onnx_since=18, attrs={"reduction": Attr("string", "none")},
        nondiff_inputs=(1,))
