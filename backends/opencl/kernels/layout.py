"""OpenCL kernels: Size, DepthToSpace / SpaceToDepth (a strided copy of a transposed view),
Hardmax and OneHot (a comparison with the positions along the axis)."""
from __future__ import annotations

import numpy as np

from portable.ops.layout import one_hot_depth, shuffle_plan

from backends.opencl.allocator import empty, host_value
from backends.opencl.elementwise import apply, assign, upload_into
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce

kernels, kernel = kernel_table()


@kernel("Size", half="native")
def size(ctx, inputs, outputs, attrs):
    upload_into(outputs[0], np.asarray(inputs[0].size, np.int64))


def _shuffle(op: str):
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        split, perm, _ = shuffle_plan(op, x.shape, attrs["blocksize"], attrs["mode"])
        target = out if out.is_contiguous else empty(out.runtime, out.shape, out.dtype)
        assign(target.reshape([split[p] for p in perm]), x.reshape(split).transpose(perm))
        if target is not out:
            assign(out, target)
    run.__name__ = op.lower()
    return run


kernel("DepthToSpace", half="native")(_shuffle("DepthToSpace"))
kernel("SpaceToDepth", half="native")(_shuffle("SpaceToDepth"))


@kernel("Hardmax", half="native")
def hardmax(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    best = reduce(x, (axis,), "argmax", True)
    spread = [1] * x.ndim
    spread[axis] = x.shape[axis]
    positions = np.arange(x.shape[axis], dtype=np.int64).reshape(spread)
    apply("Cast", apply("Equal", positions, best), out=outputs[0])


@kernel("OneHot", half="native")
def one_hot(ctx, inputs, outputs, attrs):
    indices, depth, values = inputs
    out = outputs[0]
    depth = one_hot_depth(host_value(depth))
    axis = attrs["axis"] % out.ndim
    index = apply("Cast", indices, dtype=np.int64)
    index = apply("Where", apply("Less", index, 0), apply("Add", index, depth), index)
    spread = [1] * out.ndim
    spread[axis] = depth
    shape = list(indices.shape)
    shape.insert(axis, 1)
    hot = apply("Equal", index.reshape(shape), np.arange(depth, dtype=np.int64).reshape(spread))
    off, on = (np.asarray(host_value(values)).reshape(-1)[k] for k in (0, 1))
    apply("Where", hot, out.dtype.type(on), out.dtype.type(off), out=out)
