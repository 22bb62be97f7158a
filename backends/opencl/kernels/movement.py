"""OpenCL kernels: movement ops.

Most are one strided copy: the source is a view (transposed, sliced, broadcast) and the copy
is the generated elementwise kernel, so Transpose, Expand, Slice, Concat, Split and Tile need
no kernel of their own. Gather and its gradient are hand-written; reflect/edge/wrap padding is
a Gather per axis of the source indices NumPy's pad gives for ``arange``.

Shape-like inputs (axes, pads, bounds) are read through ``host_value``: small integer arrays
uploaded from the host keep a host copy, so reading them costs no device round trip.
"""
from __future__ import annotations

import numpy as np

from portable.ops.movement import (constant_value, ints, pad_widths, range_values, shape_range,
                                   slice_bounds, slices_of, split_sizes)

from backends.opencl.allocator import CLArray, empty, from_numpy, host_value, upload_into
from backends.opencl.arrayops import assign
from backends.opencl.kernels.table import kernel_table
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()


def _host(array):
    return None if array is None else host_value(array)


def _optional(inputs, index):
    return inputs[index] if len(inputs) > index else None


@kernel("Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze", half="native")
def reshape(ctx, inputs, outputs, attrs):
    # Only runs when the planner could not alias the output to the input (a view op).
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


# -- Gather and GatherGrad ---------------------------------------------------------------------

_GATHER = """
__kernel void gather(const int n, const int inner, const int count, const int size,
                     __global const {T}* data, const int d_off,
                     __global const {I}* index, const int i_off,
                     __global {T}* out, const int o_off, __global int* bad) {{
  const int i = get_global_id(0);
  if (i >= n) return;
  const int in_ = i % inner;
  const int j = (i / inner) % count;
  const int outer = i / (inner * count);
  long k = index[i_off + j];
  if (k < -size || k >= size) {{ bad[0] = 1; k = 0; }}
  if (k < 0) k += size;
  out[o_off + i] = data[d_off + (outer * size + (int)k) * inner + in_];
}}
"""

_GATHER_GRAD = """
__kernel void gather_grad(const int n, const int inner, const int count, const int size,
                          __global const {T}* dy, const int d_off,
                          __global const {I}* index, const int i_off,
                          __global {T}* out, const int o_off, __global int* bad) {{
  const int i = get_global_id(0);
  if (i >= n) return;
  const int in_ = i % inner;
  const int k = (i / inner) % size;
  const int outer = i / (inner * size);
  {A} acc = 0;
  for (int j = 0; j < count; ++j) {{
    long t = index[i_off + j];
    if (t < -size || t >= size) {{ bad[0] = 1; continue; }}
    if (t < 0) t += size;
    if ((int)t == k) acc += dy[d_off + (outer * count + j) * inner + in_];
  }}
  out[o_off + i] = acc;
}}
"""


def _gather_launch(template, name, source, index, out, dim, inner):
    """Run a gather-like kernel: ``source``, ``out`` contiguous (outer, ., inner) views."""
    runtime = out.runtime
    source = source.contiguous()
    index = index.contiguous()
    target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
    c = ctype(source.dtype)
    storage = "ushort" if c.storage == "half" else c.storage  # Gather copies bits
    program = preamble([source.dtype]) + template.format(
        T=storage, I=ctype(index.dtype).storage, A=c.compute)
    kern = runtime.kernel(program, name)
    mirror = runtime.mirror(index)
    if mirror is not None and mirror.size and not -dim <= int(mirror.min()) <= \
            int(mirror.max()) < dim:
        raise IndexError(f"indices reach outside [-{dim}, {dim})")
    bad = empty(runtime, (1,), np.int32)
    assign(bad, 0)
    runtime.launch1d(kern, target.size, np.int32(target.size), np.int32(max(inner, 1)),
                     np.int32(index.size), np.int32(dim), source.buffer,
                     np.int32(source.offset), index.buffer, np.int32(index.offset),
                     target.buffer, np.int32(target.offset), bad.buffer)
    if mirror is None and bad.item():  # device-computed indices: checked on the device
        raise IndexError(f"indices reach outside [-{dim}, {dim})")
    if target is not out:
        assign(out, target)


def _inner(shape, axis):
    return int(np.prod(shape[axis + 1:], dtype=np.int64))


def gather_axis(data: CLArray, index: CLArray, axis: int, out: CLArray) -> None:
    """``out = take(data, index, axis)`` with ONNX's negative indices; out of range raises."""
    if out.size == 0:
        return
    _gather_launch(_GATHER, "gather", data, index, out, data.shape[axis],
                   _inner(data.shape, axis))


@kernel("Gather", half="native")
def gather(ctx, inputs, outputs, attrs):
    data, indices = inputs
    gather_axis(data, indices, attrs["axis"] % data.ndim, outputs[0])


def gather_grad_axis(dy: CLArray, index: CLArray, axis: int, out: CLArray) -> None:
    """Scatter-add ``dy`` into ``out`` at ``index`` along ``axis``; repeats add up. Each
    output element sums its matching indices (no atomics: deterministic)."""
    if out.size == 0:
        return
    _gather_launch(_GATHER_GRAD, "gather_grad", dy, index, out, out.shape[axis],
                   _inner(out.shape, axis))


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
