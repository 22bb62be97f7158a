"""NumPy kernels: Size, DepthToSpace / SpaceToDepth, Hardmax."""
from __future__ import annotations

import numpy as np

from portable.ops.layout import one_hot_depth, shuffle_plan

from portable.backend import kernel_table

kernels, kernel = kernel_table()


@kernel("Size")
def size(ctx, inputs, outputs, attrs):
    outputs[0][...] = np.int64(inputs[0].size)


def _shuffle(op: str):
    def run(ctx, inputs, outputs, attrs):
        x = inputs[0]
        split, perm, merged = shuffle_plan(op, x.shape, attrs["blocksize"],
                                           attrs["mode"])
        outputs[0][...] = x.reshape(split).transpose(perm).reshape(merged)
    run.__name__ = op.lower()
    return run


kernel("DepthToSpace")(_shuffle("DepthToSpace"))
kernel("SpaceToDepth")(_shuffle("SpaceToDepth"))


@kernel("Hardmax")
def hardmax(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    axis = attrs["axis"] % x.ndim
    out[...] = 0
    xp.put_along_axis(out, xp.argmax(x, axis=axis, keepdims=True), 1, axis=axis)


@kernel("OneHot")
def one_hot(ctx, inputs, outputs, attrs):
    xp, (indices, depth, values), out = ctx.xp, inputs, outputs[0]
    depth = one_hot_depth(ctx.backend.to_numpy(depth))
    axis = attrs["axis"] % out.ndim
    index = indices.astype(np.int64)
    index = xp.where(index < 0, index + depth, index)
    spread = [1] * out.ndim
    spread[axis] = depth
    hot = xp.expand_dims(index, axis) == xp.arange(depth).reshape(spread)
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    out[...] = xp.where(hot, on, off)
