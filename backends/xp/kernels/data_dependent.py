"""NumPy (and CuPy) kernels of the ops whose output shapes depend on values: NonZero, Unique,
Compress, NonMaxSuppression (``portable/ops/data_dependent.py``).

Each is a ``dynamic_outputs`` kernel: it writes into an output the planner placed (when the
values were known while planning) or makes the array (``output_array``) and returns it
(``returned_outputs``). The count that sizes an output has to reach the host to allocate; the
selection itself stays on ``ctx.xp`` where the array namespace has it (NMS's greedy loop is
host work by nature: it is sequential over the sorted boxes).
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table, output_array, returned_outputs
from portable.ops.data_dependent import compress_positions, non_max_suppression

kernels, kernel = kernel_table()


@kernel("NonZero")
def nonzero(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    if x.ndim == 0:  # no axes: one (empty) column when the scalar is non-zero
        count = int(bool(ctx.backend.to_numpy(x)))
        y = output_array(ctx, outputs, 0, (0, count), np.int64)
        return returned_outputs(outputs, [y])
    found = xp.nonzero(x)
    y = output_array(ctx, outputs, 0, (x.ndim, int(found[0].shape[0])), np.int64)
    for axis, index in enumerate(found):
        y[axis] = index
    return returned_outputs(outputs, [y])


@kernel("Unique")
def unique(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    axis = attrs["axis"]
    flat = x.reshape(-1) if axis is None else x
    axis = None if axis is None else axis % x.ndim
    values, first, inverse, counts = xp.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)  # (NumPy 2.0 gave it the input's shape)
    if not attrs["sorted"]:  # renumber by first occurrence instead of by value
        order = xp.argsort(first, kind="stable")
        rank = xp.empty_like(order)
        rank[order] = xp.arange(order.shape[0], dtype=order.dtype)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        values = xp.take(flat, first, axis=0 if axis is None else axis)
    made = []
    for index, value in enumerate((values, first, inverse, counts)[:len(outputs)]):
        dtype = x.dtype if index == 0 else np.int64
        out = output_array(ctx, outputs, index, value.shape, dtype)
        out[...] = value
        made.append(out)
    return returned_outputs(outputs, made)


@kernel("Compress")
def compress(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    axis = attrs["axis"]
    source = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else axis % x.ndim
    # the condition is small (one flag per slice) and sizes the output: read it on the host
    positions = compress_positions(ctx.backend.to_numpy(inputs[1]), source.shape[axis])
    shape = source.shape[:axis] + (positions.size,) + source.shape[axis + 1:]
    y = output_array(ctx, outputs, 0, shape, x.dtype)
    y[...] = xp.take(source, xp.asarray(positions), axis=axis)
    return returned_outputs(outputs, [y])


@kernel("NonMaxSuppression")
def nms(ctx, inputs, outputs, attrs):
    host = [None if a is None else np.asarray(ctx.backend.to_numpy(a)) for a in inputs]
    host += [None] * (5 - len(host))
    rows = non_max_suppression(*host, attrs["center_point_box"])
    y = output_array(ctx, outputs, 0, rows.shape, np.int64)
    y[...] = ctx.xp.asarray(rows)
    return returned_outputs(outputs, [y])
