"""Gather along one axis and its gradient (a deterministic scatter-add): hand-written kernels.

Besides the Gather ops (``kernels/movement.py``) they serve advanced indexing of CLArrays
(``arrayops``), reflect/edge/wrap padding, Resize and recurrent sequence lengths. Indices
follow ONNX (negative counts from the end); an index out of range raises IndexError, checked
on the host when the indices have a host copy, else by a flag the kernel sets.
"""
from __future__ import annotations

import numpy as np

from backends.opencl.allocator import CLArray, empty
from backends.opencl.elementwise import assign
from backends.opencl.scalars import ctype, preamble

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


def gather_grad_axis(dy: CLArray, index: CLArray, axis: int, out: CLArray) -> None:
    """Scatter-add ``dy`` into ``out`` at ``index`` along ``axis``; repeats add up. Each
    output element sums its matching indices (no atomics: deterministic)."""
    if out.size == 0:
        return
    _gather_launch(_GATHER_GRAD, "gather_grad", dy, index, out, out.shape[axis],
                   _inner(out.shape, axis))
