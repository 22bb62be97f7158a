"""Ops indexed element by element along one axis: GatherElements (PyTorch's ``gather``), its
gradient (a scatter-add that TopK's gradient shares), ScatterElements (``scatter_``) and
ScatterND (``index_put``), which every backend runs as ScatterElements on a 2-D view; GatherND
(its gradient a ScatterND), TensorScatter (a KV cache's update at per-batch positions),
ReverseSequence and EyeLike (ones where column - row = k).

Indices have the data's rank; along ``axis`` they pick a position (negative ones count from
the end, once), and along every other axis they stay where they are, so the output has the
indices' shape. ONNX lets the indices be shorter than the data on the other axes: only that
leading block of the data is read (and receives gradient).
"""
from __future__ import annotations

import numpy as np

from portable.dtypes import from_onnx
from portable.errors import NotDifferentiableError, ShapeError
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

# -- GatherND --------------------------------------------------------------------------------


def gather_nd_shape(data, indices, batch_dims: int) -> tuple[int, ...]:
    """GatherND's output shape: one slice of the data per index tuple (the indices' last
    axis), the first ``batch_dims`` axes shared. Raises ValueError."""
    data, indices = tuple(data), tuple(indices)
    if not 0 <= batch_dims < min(len(data), len(indices)):
        raise ValueError(f"batch_dims {batch_dims} must be in [0, {min(len(data), len(indices))})"
                         f" for data {data} and indices {indices}")
    if data[:batch_dims] != indices[:batch_dims]:
        raise ValueError(f"the first {batch_dims} axes of data {data} and indices {indices} "
                         f"must agree")
    depth = indices[-1]
    if not 1 <= depth <= len(data) - batch_dims:
        raise ValueError(f"index tuples of length {depth} must address 1 to "
                         f"{len(data) - batch_dims} axes of data {data} past batch_dims "
                         f"{batch_dims}")
    return indices[:-1] + data[batch_dims + depth:]


def _gather_nd_infer(ctx):
    if ctx.dtype(1) not in INDEX_DTYPES:
        ctx.fail(f"indices must be int32 or int64, got {ctx.dtype(1).name}")
    try:
        shape = gather_nd_shape(ctx.shape(0), ctx.shape(1), ctx.attrs["batch_dims"])
    except ValueError as exc:
        ctx.fail(str(exc))
    return [TensorType(shape, ctx.dtype(0))]


def _gather_nd_grad(g, dys):
    """ScatterND adds dy into zeros at the same index tuples; batch axes become leading
    entries of each tuple (their own coordinates), which ScatterND has no batch_dims for."""
    data, indices = g.inputs
    batch = g.attrs["batch_dims"]
    tuples = indices
    if batch:
        shape = g.shape(indices)
        coords = np.moveaxis(np.indices(shape[:batch]), 0, -1)
        coords = coords.reshape(shape[:batch] + (1,) * (len(shape) - 1 - batch) + (batch,))
        coords = np.broadcast_to(coords, shape[:-1] + (batch,)).astype(g.dtype(indices))
        tuples = g.emit("Concat", g.const(np.ascontiguousarray(coords)), indices, axis=-1)
    return [g.emit("ScatterND", g.zeros_like(data), tuples, dys[0], reduction="add"), None]


declare("GatherND", inputs=("data", "indices"), outputs=("output",), infer=_gather_nd_infer,
        attrs={"batch_dims": Attr("int", 0)}, onnx_since=13, grad=_gather_nd_grad,
        nondiff_inputs=(1,))

# -- TensorScatter ---------------------------------------------------------------------------

TENSOR_SCATTER_MODES = ("linear", "circular")


def tensor_scatter_positions(write_indices, batch: int, count: int, size: int,
                             mode: str) -> np.ndarray:
    """Where TensorScatter writes: (batch, count) positions along the cache's axis, entry
    [b, s] = write_indices[b] + s (modulo the axis' ``size`` when circular). Raises
    IndexError when a linear write leaves the cache."""
    start = np.zeros(batch, np.int64) if write_indices is None else \
        np.asarray(write_indices, np.int64).reshape(-1)
    if start.shape != (batch,):
        raise IndexError(f"write_indices {start.shape} must hold one start per batch ({batch})")
    positions = start[:, None] + np.arange(count, dtype=np.int64)[None, :]
    if mode == "circular":
        return positions % size
    if positions.size and (positions.min() < 0 or positions.max() >= size):
        raise IndexError(f"writes at {start.tolist()} of {count} entries leave the cache's "
                         f"{size} positions (mode 'linear')")
    return positions


def _tensor_scatter_infer(ctx):
    cache, update = ctx.shape(0), ctx.shape(1)
    if len(cache) < 2 or len(update) != len(cache) or ctx.dtype(1) != ctx.dtype(0):
        ctx.fail(f"past_cache {ctx.type(0)!r} (rank >= 2) and update {ctx.type(1)!r} must "
                 f"share rank and dtype")
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(cache))
    if axis == 0:
        ctx.fail("axis must not be the batch axis 0")
    if any(u != c for k, (u, c) in enumerate(zip(update, cache)) if k != axis) or \
            update[axis] > cache[axis]:
        ctx.fail(f"update {update} must match past_cache {cache} off axis {axis} and not "
                 f"exceed it along it")
    if ctx.has(2) and (ctx.dtype(2) != np.int64 or ctx.shape(2) != cache[:1]):
        ctx.fail(f"write_indices {ctx.type(2)!r} must be int64 of shape {cache[:1]}")
    if ctx.attrs["mode"] not in TENSOR_SCATTER_MODES:
        ctx.fail(f"mode {ctx.attrs['mode']!r} is not one of {TENSOR_SCATTER_MODES}")
    return [ctx.type(0)]


def _tensor_scatter_grad(g, dys):
    """The cache keeps dy where it was not written (TensorScatter of zeros); the update gets
    dy gathered at the written positions (GatherElements with (start + s) mod size)."""
    cache, update = g.inputs[:2]
    starts = g.inputs[2] if len(g.inputs) > 2 else None
    shape, rank = g.shape(update), len(g.shape(update))
    axis, mode = g.attrs["axis"] % rank, g.attrs["mode"]
    size = g.shape(cache)[axis]  # (>= the update's extent: no position is written twice)
    steps = np.arange(shape[axis], dtype=np.int64).reshape(
        [shape[axis] if k == axis else 1 for k in range(rank)])
    if starts is None:
        where = g.const(steps % size if mode == "circular" else steps)
    else:
        where = g.emit("Add", g.emit("Reshape", starts, g.const(np.asarray(
            [shape[0]] + [1] * (rank - 1), np.int64))), g.const(steps))
        if mode == "circular":
            where = g.emit("Mod", where, g.const(np.asarray(size, np.int64)))
    where = g.emit("Expand", where, g.const(np.asarray(shape, np.int64)))
    kept = g.emit("TensorScatter", dys[0], g.zeros_like(update), *g.inputs[2:],
                  axis=g.attrs["axis"], mode=mode)
    d_update = g.emit("GatherElements", dys[0], where, axis=axis)
    return [kept, d_update] + [None] * (len(g.inputs) - 2)


declare("TensorScatter", inputs=("past_cache", "update", "write_indices?"),
        outputs=("present_cache",), infer=_tensor_scatter_infer,
        attrs={"mode": Attr("string", "linear"), "axis": Attr("int", -2)}, onnx_since=24,
        grad=_tensor_scatter_grad, nondiff_inputs=(2,))

# -- ReverseSequence -------------------------------------------------------------------------


def reverse_sequence_rows(lengths, batch: int, time: int, batch_axis: int) -> np.ndarray:
    """The source row of every output row of the input viewed as (d0 * d1, rest): within its
    first ``lengths[b]`` steps each batch entry reads time backwards. Raises ValueError."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.shape != (batch,) or (lengths.size and (lengths.min() < 0 or
                                                       lengths.max() > time)):
        raise ValueError(f"sequence_lens {lengths.tolist()} must hold {batch} lengths in "
                         f"[0, {time}]")
    t = np.arange(time)[None, :]
    source = np.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # (batch, time)
    b = np.arange(batch)[:, None]
    if batch_axis == 0:
        return (b * time + source).reshape(-1)
    return (source * batch + b).T.reshape(-1)


def _reverse_sequence_infer(ctx):
    shape = ctx.shape(0)
    axes = (ctx.attrs["batch_axis"], ctx.attrs["time_axis"])
    if len(shape) < 2 or sorted(axes) != [0, 1]:
        ctx.fail(f"input (rank {len(shape)} >= 2) with batch_axis and time_axis {axes}: one "
                 f"must be 0 and the other 1")
    if ctx.dtype(1) != np.int64 or ctx.shape(1) != (shape[axes[0]],):
        ctx.fail(f"sequence_lens {ctx.type(1)!r} must be int64 of shape ({shape[axes[0]]},)")
    return [ctx.type(0)]


def _reverse_sequence_grad(g, dys):
    # A permutation that is its own inverse: dy goes back through the same reversal.
    return [g.emit("ReverseSequence", dys[0], g.inputs[1], **g.attrs), None]


declare("ReverseSequence", inputs=("input", "sequence_lens"), outputs=("Y",),
        infer=_reverse_sequence_infer, onnx_since=28, grad=_reverse_sequence_grad,
        attrs={"batch_axis": Attr("int", 1), "time_axis": Attr("int", 0)}, nondiff_inputs=(1,))

# -- EyeLike ---------------------------------------------------------------------------------


def _eye_dtype(attrs, like) -> np.dtype:
    return like if attrs["dtype"] is None else from_onnx(attrs["dtype"])


def _eye_like_infer(ctx):
    if len(ctx.shape(0)) != 2:
        ctx.fail(f"input must be 2-D, got {ctx.type(0)!r}")
    try:
        dtype = _eye_dtype(ctx.attrs, ctx.dtype(0))
    except ShapeError as exc:
        ctx.fail(f"dtype: {exc}")
    return [TensorType(ctx.shape(0), dtype)]


declare("EyeLike", inputs=("input",), outputs=("output",), infer=_eye_like_infer,
        attrs={"dtype": Attr("int", None), "k": Attr("int", 0)}, onnx_since=22,
        ignored_inputs=(0,),
        dtype_rule=lambda ctx: [_eye_dtype(ctx.attrs, ctx.dtype(0))
                                if ctx.attrs["dtype"] is not None or ctx.dtype(0) is not None
                                else None])
