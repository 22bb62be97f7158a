"""OpenCL kernels: GatherElements, its scatter-add gradient, ScatterElements, ScatterND (the
ScatterElements kernel on the data viewed as (rows, rest), one index per row); GatherND and
ReverseSequence (the shared Gather kernel over rows, their indices worked out on the host from
the small index inputs), TensorScatter (block copies) and EyeLike (uploaded, as a constant).

Both work on the block of the data the indices reach (``read_block``), made contiguous, viewed
as (outer, axis, inner): one work-item per output element. The gradient sums, for each element
of that block, the dy entries whose index points at it: no atomics, the same order every run.
"""
from __future__ import annotations

import numpy as np

from portable.ops.indexing import (nd_rows, read_block, reverse_sequence_rows,
                                   tensor_scatter_positions)

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.elementwise import assign, upload_into
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()

_GATHER = """
__kernel void gather_elements(const int total, const int count, const int size, const int inner,
                              __global const {T}* data, const int d_off,
                              __global const {I}* index, const int i_off,
                              __global {T}* out, const int o_off, __global int* bad) {{
  const int e = get_global_id(0);
  if (e >= total) return;
  const int in_ = e % inner;
  const int outer = e / (inner * count);
  long k = index[i_off + e];
  if (k < -size || k >= size) {{ bad[0] = 1; k = 0; }}
  if (k < 0) k += size;
  out[o_off + e] = data[d_off + (outer * size + (int)k) * inner + in_];
}}
"""

_SCATTER = """
__kernel void scatter_add(const int total, const int count, const int size, const int inner,
                          __global const {T}* dy, const int d_off,
                          __global const {I}* index, const int i_off,
                          __global {T}* out, const int o_off, __global int* bad) {{
  const int e = get_global_id(0);
  if (e >= total) return;
  const int in_ = e % inner;
  const int t = (e / inner) % size;
  const int outer = e / (inner * size);
  {A} acc = 0;
  for (int j = 0; j < count; ++j) {{
    const int at = (outer * count + j) * inner + in_;
    long k = index[i_off + at];
    if (k < -size || k >= size) {{ bad[0] = 1; continue; }}
    if (k < 0) k += size;
    if ((int)k == t) acc += dy[d_off + at];
  }}
  out[o_off + e] = acc;
}}
"""


_SCATTER_INTO = """
__kernel void scatter_into(const int total, const int count, const int size, const int inner,
                           __global const {T}* updates, const int u_off,
                           __global const {I}* index, const int i_off,
                           __global {T}* out, const int o_off, __global int* bad,
                           const int mode) {{
  const int e = get_global_id(0);
  if (e >= total) return;
  const int in_ = e % inner;
  const int t = (e / inner) % size;
  const int outer = e / (inner * size);
  {A} acc = out[o_off + e];
  for (int j = 0; j < count; ++j) {{  /* in index order: the last write of a place wins */
    const int at = (outer * count + j) * inner + in_;
    long k = index[i_off + at];
    if (k < -size || k >= size) {{ bad[0] = 1; continue; }}
    if (k < 0) k += size;
    if ((int)k != t) continue;
    const {A} v = updates[u_off + at];
    acc = mode == 0 ? v : mode == 1 ? acc + v : mode == 2 ? acc * v
        : mode == 3 ? (v > acc ? v : acc) : (v < acc ? v : acc);
  }}
  out[o_off + e] = acc;
}}
"""
_MODES = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


def _launch(template, name, source, index, out, size, axis, *extra):
    """Run ``name`` over ``out`` (contiguous); ``source`` and ``index`` made contiguous."""
    runtime = out.runtime
    source = source.contiguous()
    index = index.contiguous()
    inner = int(np.prod(index.shape[axis + 1:], dtype=np.int64))
    c = ctype(source.dtype)
    program = preamble([source.dtype]) + template.format(T=c.storage, A=c.compute,
                                                         I=ctype(index.dtype).storage)
    bad = empty(runtime, (1,), np.int32)
    assign(bad, 0)
    runtime.launch1d(runtime.kernel(program, name), out.size, np.int32(out.size),
                     np.int32(index.shape[axis]), np.int32(size), np.int32(max(inner, 1)),
                     source.buffer, np.int32(source.offset), index.buffer,
                     np.int32(index.offset), out.buffer, np.int32(out.offset), bad.buffer,
                     *extra)
    if bad.item():
        raise IndexError(f"indices reach outside [-{size}, {size})")


@kernel("GatherElements")
def gather_elements(ctx, inputs, outputs, attrs):
    data, index = inputs
    out = outputs[0]
    if out.size == 0:
        return
    axis = attrs["axis"] % data.ndim
    target = out if out.is_contiguous else empty(out.runtime, out.shape, out.dtype)
    _launch(_GATHER, "gather_elements", data[read_block(index.shape, axis)], index, target,
            data.shape[axis], axis)
    if target is not out:
        assign(out, target)


@kernel("portable.GatherElementsGrad")
def gather_elements_grad(ctx, inputs, outputs, attrs):
    dy, index = inputs
    dx = outputs[0]
    axis = attrs["axis"] % dx.ndim
    assign(dx, 0)
    block = dx[read_block(index.shape, axis)]
    if block.size == 0:
        return
    target = block if block.is_contiguous else empty(dx.runtime, block.shape, dx.dtype)
    _launch(_SCATTER, "scatter_add", dy, index, target, dx.shape[axis], axis)
    if target is not block:
        assign(block, target)


@kernel("ScatterElements")
def scatter_elements(ctx, inputs, outputs, attrs):
    data, index, updates = inputs
    out = outputs[0]
    axis = attrs["axis"] % data.ndim
    assign(out, data)
    block = out[read_block(index.shape, axis)]
    if block.size == 0 or index.size == 0:
        return
    target = block.contiguous()
    _launch(_SCATTER_INTO, "scatter_into", updates, index, target, data.shape[axis], axis,
            np.int32(_MODES[attrs["reduction"]]))
    if target is not block:
        assign(block, target)


@kernel("ScatterND")
def scatter_nd(ctx, inputs, outputs, attrs):
    data, index, updates = inputs
    out = outputs[0]
    depth = index.shape[-1]
    rows = nd_rows(np, np.asarray(host_value(index)), data.shape[:depth])
    rest = int(np.prod(data.shape[depth:], dtype=np.int64))
    target = out if out.is_contiguous else empty(out.runtime, out.shape, out.dtype)
    assign(target, data)
    if rows.size and rest:
        per_row = from_numpy(out.runtime, np.repeat(rows[:, None], rest, axis=1))
        updates = updates.contiguous()
        _launch(_SCATTER_INTO, "scatter_into", updates.reshape(len(rows), rest), per_row,
                target.reshape(target.size // rest, rest), target.size // rest, 0,
                np.int32(_MODES[attrs["reduction"]]))
    if target is not out:
        assign(out, target)


def _rows_gather(source, rows, out):
    """``out`` (rows.size x rest, any view) = the rows ``rows`` (host int64) of ``source``
    viewed as (n, rest): the shared Gather kernel along axis 0."""
    rest = int(np.prod(out.shape, dtype=np.int64)) // max(rows.size, 1)
    target = out if out.is_contiguous else empty(out.runtime, out.shape, out.dtype)
    if target.size:
        flat = source.contiguous()
        gather_axis(flat.reshape(flat.size // rest, rest),
                    from_numpy(out.runtime, np.ascontiguousarray(rows, np.int64)), 0,
                    target.reshape(rows.size, rest))
    if target is not out:
        assign(out, target)


@kernel("GatherND", half="native")
def gather_nd(ctx, inputs, outputs, attrs):
    data, index = inputs
    batch_dims, depth = attrs["batch_dims"], index.shape[-1]
    batch = int(np.prod(data.shape[:batch_dims], dtype=np.int64))
    addressed = data.shape[batch_dims:batch_dims + depth]
    rows = nd_rows(np, np.asarray(host_value(index)), addressed).reshape(batch, -1)
    count = int(np.prod(addressed, dtype=np.int64))
    _rows_gather(data, (rows + np.arange(batch)[:, None] * count).reshape(-1), outputs[0])


@kernel("ReverseSequence", half="native")
def reverse_sequence(ctx, inputs, outputs, attrs):
    x = inputs[0]
    batch_axis = attrs["batch_axis"]
    _rows_gather(x, reverse_sequence_rows(host_value(inputs[1]), x.shape[batch_axis],
                                          x.shape[1 - batch_axis], batch_axis), outputs[0])


@kernel("TensorScatter", half="native")
def tensor_scatter(ctx, inputs, outputs, attrs):
    """The cache copied, then each batch's update written as at most a few block copies (a
    circular write wraps once at the end of the axis)."""
    cache, update, out = inputs[0], inputs[1], outputs[0]
    axis = attrs["axis"] % cache.ndim
    starts = inputs[2] if len(inputs) > 2 else None
    size, count = cache.shape[axis], update.shape[axis]
    positions = tensor_scatter_positions(None if starts is None else host_value(starts),
                                         cache.shape[0], count, size, attrs["mode"])
    assign(out, cache)
    lead = (slice(None),) * (axis - 1)
    for b in range(cache.shape[0]):
        done = 0
        while done < count:  # a run of consecutive positions is one copy
            start = int(positions[b, done])
            run = min(count - done, size - start)
            assign(out[(b,) + lead + (slice(start, start + run),)],
                   update[(b,) + lead + (slice(done, done + run),)])
            done += run


@kernel("EyeLike", half="native")
def eye_like(ctx, inputs, outputs, attrs):
    out = outputs[0]
    upload_into(out, np.eye(out.shape[0], out.shape[1], k=attrs["k"], dtype=out.dtype))
