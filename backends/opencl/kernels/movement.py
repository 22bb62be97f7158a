"""OpenCL kernels: movement ops.

Most are one strided copy: the source is a view (transposed, sliced, broadcast) and the copy
is the generated elementwise kernel, so Transpose, Expand, Slice, Concat, Split and Tile need
no kernel of their own. Gather and its gradient run the hand-written kernels of
``backends.opencl.gather``; reflect/edge/wrap padding is a Gather per axis of the source
indices NumPy's pad gives for ``arange``.

Shape-like inputs (axes, pads, bounds) are read through ``host_value``: small integer arrays
uploaded from the host keep a host copy, so reading them costs no device round trip.
"""
from __future__ import annotations

import numpy as np

from portable.ops.movement import (constant_value, ints, pad_widths, range_values, shape_range,
                                   slice_bounds, slices_of, split_sizes)

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.elementwise import assign, upload_into
from backends.opencl.gather import gather_axis, gather_grad_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _host(array):
    return None if array is None else host_value(array)


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


@kernel("Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze", half="native")
def reshape(ctx, inputs, outputs, attrs):
    # Only runs when the planner could not alias the output to the input (a view op).
    if outputs[0] is None:  # Identity of a sequence, an optional or a run-time-shaped tensor
        return [inputs[0]]  # (values are never written in place: passing it on is safe)
    assign(outputs[0], inputs[0].reshape(outputs[0].shape))


@kernel("ConstantOfShape", half="native")
def constant_of_shape(ctx, inputs, outputs, attrs):
    value = attrs["value"]
    assign(outputs[0], 0 if value is None else np.asarray(value).reshape(()).item())


@kernel("Expand", half="native")
def expand(ctx, inputs, outputs, attrs):
    assign(outputs[0], inputs[0])


@kernel("Transpose", half="native")
def transpose(ctx, inputs, outputs, attrs):
    perm = attrs["perm"]
    assign(outputs[0], inputs[0].transpose(None if perm is None else tuple(perm)))


@kernel("Tile", half="native")
def tile(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    repeats = [o // d if d else 0 for o, d in zip(out.shape, x.shape)]
    # The output as (r0, d0, r1, d1, ...) gets x broadcast over the repeat axes: one copy.
    split = [v for r, d in zip(repeats, x.shape) for v in (r, d)]
    spread = [v for d in x.shape for v in (1, d)]
    target = out if out.is_contiguous else empty(out.runtime, out.shape, out.dtype)
    assign(target.reshape(split), x.reshape(spread))
    if target is not out:
        assign(out, target)


@kernel("Concat", half="native")
def concat(ctx, inputs, outputs, attrs):
    out = outputs[0]
    axis = attrs["axis"] % out.ndim
    start = 0
    for x in inputs:
        if x is None:
            continue
        assign(out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)], x)
        start += x.shape[axis]


@kernel("Split", half="native")
def split(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    given = _host(_optional(inputs, 1))
    sizes = split_sizes(x.shape[axis], None if given is None else ints(given),
                        attrs["num_outputs"], len(outputs))
    start = 0
    for out, size in zip(outputs, sizes):
        if out is not None:
            assign(out, x[(slice(None),) * axis + (slice(start, start + size),)])
        start += size


def _bounds(shape, inputs):
    return slice_bounds(shape, *(_host(_optional(inputs, i)) for i in range(1, 5)))


@kernel("Slice", half="native")
def slice_(ctx, inputs, outputs, attrs):
    assign(outputs[0], inputs[0][slices_of(_bounds(inputs[0].shape, inputs))])


@kernel("portable.SliceGrad", half="native")
def slice_grad(ctx, inputs, outputs, attrs):
    out = outputs[0]
    assign(out, 0)
    assign(out[slices_of(_bounds(out.shape, inputs))], inputs[0])


# -- Gather and GatherGrad (the launches are in backends.opencl.gather) ---------------------


@kernel("Gather", half="native")
def gather(ctx, inputs, outputs, attrs):
    data, indices = inputs
    gather_axis(data, indices, attrs["axis"] % data.ndim, outputs[0])


@kernel("portable.GatherGrad")
def gather_grad(ctx, inputs, outputs, attrs):
    dy, indices = inputs
    out = outputs[0]
    gather_grad_axis(dy, indices, attrs["axis"] % out.ndim, out)


# -- Pad, Shape, Constant, Range -------------------------------------------------------------------


@kernel("Pad", half="native")
def pad(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    widths = pad_widths(x.shape, _host(inputs[1]), _host(_optional(inputs, 3)))
    mode = attrs["mode"]
    if mode != "constant":
        current = x
        for axis, (before, after) in enumerate(widths):
            if before or after:
                index = np.pad(np.arange(x.shape[axis], dtype=np.int64), (before, after),
                               mode=mode)
                shape = list(current.shape)
                shape[axis] = index.size
                step = empty(out.runtime, shape, x.dtype)
                gather_axis(current, from_numpy(out.runtime, index), axis, step)
                current = step
        assign(out, current)
        return
    value = _optional(inputs, 2)
    assign(out, 0 if value is None else value.reshape(()))
    source = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    target = tuple(slice(max(b, 0), o - max(e, 0)) for o, (b, e) in zip(out.shape, widths))
    assign(out[target], x[source])


@kernel("Shape", half="native")
def shape(ctx, inputs, outputs, attrs):
    dims = inputs[0].shape[shape_range(inputs[0].ndim, attrs["start"], attrs["end"])]
    upload_into(outputs[0], np.asarray(dims, dtype=np.int64))


@kernel("Constant", half="native")
def constant(ctx, inputs, outputs, attrs):
    upload_into(outputs[0], constant_value(attrs))


@kernel("Range", half="native")
def range_(ctx, inputs, outputs, attrs):
    host = [host_value(v) for v in inputs]
    upload_into(outputs[0], range_values(*host, attrs["stash_type"]))
