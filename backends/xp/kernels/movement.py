"""NumPy kernels: movement ops, written against ``ctx.xp`` in destination-passing style.

Where an output's shape already tells what a kernel needs (Split sizes, Tile repeats, the target
of a reshape), kernels read it from the preallocated output instead of reading shape inputs back
from the device.
"""
from __future__ import annotations

import numpy as np

from portable.ops.movement import (constant_value, ints, pad_widths, range_values, shape_range,
                                   slice_bounds, slices_of, split_sizes)

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _host(ctx, array):
    """A small index input (axes, pads, bounds) as a host array, or None when absent."""
    return None if array is None else ctx.backend.to_numpy(array)


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


@kernel("Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze")
def reshape(ctx, inputs, outputs, attrs):
    # Only runs when the planner could not alias the output to the input (a view op).
    if outputs[0] is None:  # Identity of a sequence, an optional or a run-time-shaped tensor
        return [inputs[0]]  # (values are never written in place: passing it on is safe)
    outputs[0][...] = ctx.xp.reshape(inputs[0], outputs[0].shape)


@kernel("ConstantOfShape")
def constant_of_shape(ctx, inputs, outputs, attrs):
    value = attrs["value"]
    outputs[0][...] = 0 if value is None else value.reshape(())


@kernel("Expand")
def expand(ctx, inputs, outputs, attrs):
    outputs[0][...] = inputs[0]


def _prepare_transpose(backend, input_types, output_types, attrs) -> tuple[int, ...]:
    """The permutation as a tuple (no ``perm``: the axes reversed), parsed once per step."""
    perm = attrs["perm"]
    if perm is None:
        return tuple(reversed(range(len(input_types[0].shape))))
    return tuple(int(axis) for axis in perm)


@kernel("Transpose", prepare=_prepare_transpose)
def transpose(perm, ctx, inputs, outputs, attrs):
    # (the array's own method: a small transpose costs about a microsecond, and the namespace
    # function's dispatch was a third of it)
    outputs[0][...] = inputs[0].transpose(perm)


@kernel("Tile")
def tile(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    repeats = [o // d if d else 0 for o, d in zip(out.shape, x.shape)]
    # View the output as (r0, d0, r1, d1, ...) and broadcast x over the repeat axes: no temp.
    split = [v for r, d in zip(repeats, x.shape) for v in (r, d)]
    spread = [v for d in x.shape for v in (1, d)]
    out.reshape(split)[...] = x.reshape(spread)


@kernel("Concat")
def concat(ctx, inputs, outputs, attrs):
    ctx.xp.concatenate(inputs, axis=attrs["axis"] % outputs[0].ndim, out=outputs[0])


@kernel("Split")
def split(ctx, inputs, outputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    split = _host(ctx, _optional(inputs, 1))
    sizes = split_sizes(x.shape[axis], None if split is None else ints(split),
                        attrs["num_outputs"], len(outputs))
    lead = (slice(None),) * axis
    start = 0
    for out, size in zip(outputs, sizes):
        if out is not None:
            out[...] = x[lead + (slice(start, start + size),)]
        start += size


def _bounds(ctx, shape, inputs):
    return slice_bounds(shape, *(_host(ctx, _optional(inputs, i)) for i in range(1, 5)))


@kernel("Slice")
def slice_(ctx, inputs, outputs, attrs):
    outputs[0][...] = inputs[0][slices_of(_bounds(ctx, inputs[0].shape, inputs))]


@kernel("portable.SliceGrad")
def slice_grad(ctx, inputs, outputs, attrs):
    out = outputs[0]
    out[...] = 0
    out[slices_of(_bounds(ctx, out.shape, inputs))] = inputs[0]


def _check_indices(indices, size: int) -> None:
    """ONNX makes an index outside [-size, size) an error; take below would wrap it."""
    if indices.size and not -size <= int(indices.min()) <= int(indices.max()) < size:
        raise IndexError(f"indices reach outside [-{size}, {size})")


def _prepare_gather(backend, input_types, output_types, attrs) -> tuple[int, bool]:
    """(axis, whether the index is a scalar): a scalar index on a host array selects one
    sub-array by basic indexing, which copies with no index bookkeeping (attention's q/k/v
    split gathers 0, 1 and 2 from one packed projection)."""
    data, indices = input_types[:2]
    axis = attrs["axis"] % max(len(data.shape), 1)
    return axis, backend.xp is np and indices is not None and len(indices.shape) == 0


@kernel("Gather", prepare=_prepare_gather)
def gather(plan, ctx, inputs, outputs, attrs):
    data, indices = inputs
    axis, scalar = plan
    if scalar:
        index, size = int(indices), data.shape[axis]
        if not -size <= index < size:
            raise IndexError(f"index {index} reaches outside [-{size}, {size})")
        outputs[0][...] = data[(slice(None),) * axis + (index,)]
        return
    _check_indices(indices, data.shape[axis])
    # NumPy's default mode="raise" buffers `out` (a hidden copy); "wrap" writes straight into
    # it and maps the checked negative indices as ONNX does. CuPy always wraps (no mode).
    wrap = {"mode": "wrap"} if ctx.xp is np else {}
    ctx.xp.take(data, indices, axis=axis, out=outputs[0], **wrap)


@kernel("portable.GatherGrad")
def gather_grad(ctx, inputs, outputs, attrs):
    dy, indices = inputs
    out = outputs[0]
    axis = attrs["axis"] % out.ndim
    _check_indices(indices, out.shape[axis])
    outer = int(np.prod(out.shape[:axis], dtype=np.int64))
    inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64))
    out[...] = 0
    # Move the gathered axis to the front of 3-D views so one unbuffered add.at accumulates
    # every repeated index.
    target = ctx.xp.moveaxis(out.reshape(outer, out.shape[axis], inner), 1, 0)
    source = ctx.xp.moveaxis(dy.reshape(outer, indices.size, inner), 1, 0)
    ctx.xp.add.at(target, indices.reshape(-1), source)


@kernel("Pad")
def pad(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    widths = pad_widths(x.shape, _host(ctx, inputs[1]), _host(ctx, _optional(inputs, 3)))
    mode = attrs["mode"]
    if mode != "constant":
        out[...] = ctx.xp.pad(x, widths, mode=mode)
        return
    value = _optional(inputs, 2)
    value = 0 if value is None else value.reshape(())
    # Fill only the borders, then copy the (possibly cropped, for negative pads) interior.
    for axis, (before, after) in enumerate(widths):
        lead = (slice(None),) * axis
        if before > 0:
            out[lead + (slice(0, before),)] = value
        if after > 0:
            out[lead + (slice(out.shape[axis] - after, None),)] = value
    source = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    target = tuple(slice(max(b, 0), o - max(e, 0)) for o, (b, e) in zip(out.shape, widths))
    out[target] = x[source]


@kernel("Shape")
def shape(ctx, inputs, outputs, attrs):
    dims = inputs[0].shape[shape_range(inputs[0].ndim, attrs["start"], attrs["end"])]
    outputs[0][...] = ctx.xp.asarray(dims, dtype=np.int64)


@kernel("Constant")
def constant(ctx, inputs, outputs, attrs):
    outputs[0][...] = ctx.xp.asarray(constant_value(attrs))


@kernel("Range")
def range_(ctx, inputs, outputs, attrs):
    host = [ctx.backend.to_numpy(v) for v in inputs]
    outputs[0][...] = ctx.xp.asarray(range_values(*host, attrs["stash_type"]))
