"""NumPy kernels: GatherElements, its scatter-add gradient, ScatterElements, ScatterND, GatherND,
TensorScatter, ReverseSequence, EyeLike."""
from __future__ import annotations

import numpy as np

from portable.ops.indexing import (nd_rows, read_block, reverse_sequence_rows,
                                   tensor_scatter_positions)

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _positions(xp, indices, size: int):
    """The indices with negative ones counted from the end; outside [-size, size) raises."""
    if indices.size and not -size <= int(indices.min()) <= int(indices.max()) < size:
        raise IndexError(f"indices reach outside [-{size}, {size})")
    return xp.where(indices < 0, indices + size, indices)


@kernel("GatherElements")
def gather_elements(ctx, inputs, outputs, attrs):
    data, indices = inputs
    axis = attrs["axis"] % data.ndim
    block = data[read_block(indices.shape, axis)]
    outputs[0][...] = ctx.xp.take_along_axis(block, _positions(ctx.xp, indices, data.shape[axis]),
                                             axis=axis)


@kernel("portable.GatherElementsGrad")
def gather_elements_grad(ctx, inputs, outputs, attrs):
    xp, (dy, indices), dx = ctx.xp, inputs, outputs[0]
    axis = attrs["axis"] % dx.ndim
    dx[...] = 0
    where = list(xp.indices(indices.shape, sparse=True))
    where[axis] = _positions(xp, indices, dx.shape[axis])
    # unbuffered: repeated indices add up
    xp.add.at(dx[read_block(indices.shape, axis)], tuple(where), dy)


_AT = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


@kernel("ScatterElements")
def scatter_elements(ctx, inputs, outputs, attrs):
    xp, (data, indices, updates), out = ctx.xp, inputs, outputs[0]
    axis = attrs["axis"] % data.ndim
    out[...] = data
    where = list(xp.indices(indices.shape, sparse=True))
    where[axis] = _positions(xp, indices, data.shape[axis])
    block = out[read_block(indices.shape, axis)]
    if attrs["reduction"] == "none":
        block[tuple(where)] = updates  # (a place written twice keeps the last write)
    else:  # unbuffered: every update of a place counts
        getattr(xp, _AT[attrs["reduction"]]).at(block, tuple(where), updates)


@kernel("ScatterND")
def scatter_nd(ctx, inputs, outputs, attrs):
    xp, (data, indices, updates), out = ctx.xp, inputs, outputs[0]
    depth = indices.shape[-1]
    rows = nd_rows(xp, indices, data.shape[:depth])
    flat = xp.array(data.reshape(-1, int(np.prod(data.shape[depth:], dtype=np.int64))))
    values = updates.reshape(len(rows), flat.shape[1])
    if attrs["reduction"] == "none":
        flat[rows] = values  # (a row written twice keeps the last write)
    else:
        getattr(xp, _AT[attrs["reduction"]]).at(flat, rows, values)
    out[...] = flat.reshape(out.shape)


@kernel("GatherND")
def gather_nd(ctx, inputs, outputs, attrs):
    xp, (data, indices), out = ctx.xp, inputs, outputs[0]
    batch_dims, depth = attrs["batch_dims"], indices.shape[-1]
    batch = int(np.prod(data.shape[:batch_dims], dtype=np.int64))
    addressed = data.shape[batch_dims:batch_dims + depth]
    rows = nd_rows(xp, indices, addressed).reshape(batch, -1)
    flat = data.reshape(batch, int(np.prod(addressed, dtype=np.int64)), -1)
    out[...] = flat[xp.arange(batch)[:, None], rows].reshape(out.shape)


@kernel("TensorScatter")
def tensor_scatter(ctx, inputs, outputs, attrs):
    xp, (cache, update), out = ctx.xp, inputs[:2], outputs[0]
    axis = attrs["axis"] % cache.ndim
    starts = inputs[2] if len(inputs) > 2 else None
    positions = tensor_scatter_positions(
        None if starts is None else ctx.backend.to_numpy(starts), cache.shape[0],
        update.shape[axis], cache.shape[axis], attrs["mode"])
    out[...] = cache
    # (batch, position, ...) views: one advanced assignment writes every batch's block
    target = xp.moveaxis(out, axis, 1)
    target[xp.arange(cache.shape[0])[:, None], xp.asarray(positions)] = \
        xp.moveaxis(update, axis, 1)


@kernel("ReverseSequence")
def reverse_sequence(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    batch_axis = attrs["batch_axis"]
    rows = reverse_sequence_rows(ctx.backend.to_numpy(inputs[1]), x.shape[batch_axis],
                                 x.shape[1 - batch_axis], batch_axis)
    flat = x.reshape(x.shape[0] * x.shape[1], -1)
    out[...] = flat[ctx.xp.asarray(rows)].reshape(out.shape)


@kernel("EyeLike")
def eye_like(ctx, inputs, outputs, attrs):
    out = outputs[0]
    out[...] = ctx.xp.eye(out.shape[0], out.shape[1], k=attrs["k"], dtype=out.dtype)
