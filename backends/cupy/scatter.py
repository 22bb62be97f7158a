"""ScatterElements for CuPy: the shared kernel, except reduction='mul'.

The shared kernel reduces repeated targets with ``xp.<ufunc>.at``; CuPy has ``.at`` for add,
subtract, maximum and minimum but not for multiply. Here the updates of a 'mul' scatter are
applied in rounds: round k takes, for every target, its k-th update (in index order, as
``numpy.multiply.at`` applies them), so the targets within one round are distinct and a plain
gather-multiply-scatter is exact. Rounds = the most updates any one target receives.

Written over ``ctx.xp`` with CuPy's API only, so the strict namespace test runs it on a CPU.
"""
from __future__ import annotations

from backends.xp.kernels import indexing as shared
from portable.backend import kernel_table
from portable.ops.indexing import read_block

kernels, kernel = kernel_table()


@kernel("ScatterElements")
def scatter_elements(ctx, inputs, outputs, attrs):
    if attrs["reduction"] != "mul":
        return shared.scatter_elements(ctx, inputs, outputs, attrs)
    xp, (data, indices, updates), out = ctx.xp, inputs, outputs[0]
    axis = attrs["axis"] % data.ndim
    count = int(indices.size)
    block_shape = data[read_block(indices.shape, axis)].shape
    where = list(xp.indices(indices.shape))
    where[axis] = shared._positions(xp, indices, data.shape[axis])
    targets = xp.ravel_multi_index(tuple(where), block_shape).reshape(-1)
    values = updates.reshape(-1)
    # Sort by (target, position): a unique key, so the order within a target is index order.
    order = xp.argsort(targets * count + xp.arange(count))
    ranked = targets[order]
    rank = xp.arange(count) - xp.searchsorted(ranked, ranked, side="left")
    flat = xp.array(data[read_block(indices.shape, axis)]).reshape(-1)
    rounds = int(rank.max()) + 1 if count else 0
    for k in range(rounds):
        chosen = order[rank == k]
        at = targets[chosen]
        flat[at] = flat[at] * values[chosen]
    out[...] = data
    out[read_block(indices.shape, axis)] = flat.reshape(block_shape)
