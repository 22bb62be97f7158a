"""NumPy kernels: GatherElements, its scatter-add gradient, ScatterElements, ScatterND."""
from __future__ import annotations

import numpy as np

from portable.ops.indexing import nd_rows, read_block

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
