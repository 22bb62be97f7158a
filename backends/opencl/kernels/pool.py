"""OpenCL kernels: MaxPool (with Indices), AveragePool, their gradients, global pools.

The program is built per window shape (kernel, strides, dilations as constants, so the walks
unroll: MaxPool 3x3/2 on 1x96x109x109 went from ~36 ms to ~6 ms on PoCL). MaxPool without
Indices and AveragePool compute a row of outputs per work-item with the window's taps unrolled
(``row_windows``: 1.3 -> 0.36 ms and 1.2 -> 0.46 ms on that input, ``benchmarks/
opencl_kernels.py``); max pooling never picks padding, average pooling divides by the count
ONNX prescribes. MaxPool with Indices walks each window of a run of outputs, recording where
its first maximum lies. Gradients run in gather form
over the input: MaxPoolGrad first records each window's first maximum (MaxPool's Indices),
then each input element sums dY over the windows whose maximum it is; AveragePoolGrad sums
dY / count over the windows that reach it. No atomics, so results are deterministic.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from portable.ops.conv import pool_geometry

from backends.opencl.allocator import empty
from backends.opencl.elementwise import assign
from backends.opencl.kernels.row_windows import row_head, row_loops, tap_terms
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.window import (INPUT_POSITION, ROW_RUN, Window, geometry,
                                            over_window, over_windows_reaching, row_run_head,
                                            run_items, window_shape)
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, limits, preamble

kernels, kernel = kernel_table()


def _window_count(indent: str) -> str:
    """The C count ONNX divides window (od, oh, ow)'s sum by: its positions inside
    [-head, size + tail) with include_pad (count_include_pad), else inside [0, size); one
    ``inside`` factor per axis, each on a line of its own indented by ``indent``."""
    # An inline C function taking the int16 geometry would be shorter, but PoCL warns that a
    # 16-int vector argument changes the ABI without AVX-512, so the expression is spliced in.
    return f" *\n{indent}".join(
        f"inside(o{a.lower()}, S{a}, H{a}, K{a}, D{a}, include_pad ? -H{a} : 0, "
        f"include_pad ? I{a} + tp.s{j} : I{a})" for j, a in enumerate("DHW"))


def _input_prologue(fixed: Window | None) -> str:
    """The start of a gradient kernel with one work-item per element i of the (N * C, P)
    inputs: its image-channel nc and its position (``fixed``: the window shape as constants,
    see ``geometry``)."""
    return f"""const int i = get_global_id(0);
  if (i >= total) return;
  {geometry(fixed)}
  const int O = OD * OH * OW, P = ID * IH * IW;
  const int p = i % P, nc = i / P;
  {INPUT_POSITION}"""


def _run_prologue(fixed: Window | None) -> str:
    """The start of MaxPool with Indices, one work-item per run of outputs of a row
    (``total``: how many runs; :func:`~backends.opencl.kernels.window.row_run_head`), then a
    loop over the run that opens with ``o``, ``i`` and ``ow`` (closed by the kernel). Runs
    took MaxPool 3x3/2 on 1x96x109x109 from 2.1 to 1.3-1.4 ms on PoCL."""
    return f"""const int item = get_global_id(0);
  if (item >= total) return;
  {geometry(fixed)}
  const int O = OD * OH * OW, P = ID * IH * IW;
  {row_run_head("nc")}
  for (int ow = ow0; ow < ow_end; ++ow) {{
  const int o = (od * OH + oh) * OW + ow, i = nc * O + o;"""


# The dtype-independent window walk of pool_grad, built once.
_GRAD_SUM = over_windows_reaching(f"""
    const int o = (od * OH + oh) * OW + ow;
    if (mode == 0) {{  /* max: this element must be the window's recorded maximum */
      if (index[i_off + nc * O + o] == (long)nc * P + p) acc += dy[dy_off + nc * O + o];
    }} else {{
      const int count =
          {_window_count("          ")};
      acc += dy[dy_off + nc * O + o] / count;
    }}""")


@lru_cache(maxsize=None)
def _pool_source(dtype: np.dtype, fixed: Window, run: int) -> str:
    """The pooling program for ``dtype`` (see each kernel's comment) and windows of
    ``fixed``'s kernel shape, strides and dilations (constants: the loops unroll); the row
    kernels' work-items compute ``run`` outputs of a row."""
    c = ctype(dtype)
    lowest = limits(dtype)[0]
    max_walk = over_window(f"""
        const int valid = pd >= 0 && pd < ID && ph >= 0 && ph < IH && pw >= 0 && pw < IW;
        const {c.compute} v = valid ? x[x_off + nc * P + (pd * IH + ph) * IW + pw] : {lowest};
        if (!started || v > best) {{  /* the first maximum, padding included (np.argmax) */
          started = 1;
          best = v;
          at = valid ? (column_major ? (pw * IH + ph) * ID + pd : (pd * IH + ph) * IW + pw)
                     : -1;
        }}""", skip_padding=False)
    def maximum(checks):  # the first tap, then each greater one (padding: the lowest value)
        taps = tap_terms(fixed, checks, lambda t, v: v, lowest, "\n")
        first, *rest = taps.split("\n")
        steps = " ".join(f"{{ const {c.compute} v = {v}; best = v > best ? v : best; }}"
                         for v in rest)
        return f"{c.compute} best = {first}; {steps} y[y_off + y_row + ow] = best;"

    def average(checks):  # the taps' sum over the count ONNX prescribes
        total = tap_terms(fixed, checks, lambda t, v: f"({c.compute}){v}", "0", " + ")
        count = (str(math.prod(fixed.kernel)) if checks == (False, False) else
                 _window_count("        "))
        return f"y[y_off + y_row + ow] = ({total}) / ({count});"
    return preamble([dtype]) + f"""
/* The number of window positions of axis (o, start) inside [low, high). */
inline int inside(const int o, const int s, const int h, const int k, const int d,
                  const int low, const int high) {{
  int count = 0;
  for (int j = 0; j < k; ++j) {{
    const int p = o * s - h + j * d;
    count += p >= low && p < high;
  }}
  return count;
}}

/* MaxPool: y = the window's maximum; index = flat input index of its first maximum
   (row-major, or column-major over the spatial axes when column_major), -1 if padding. */
__kernel void max_pool(const int total, const int16 g, const int4 hp,
                       __global const {c.storage}* x, const int x_off, __global {c.storage}* y,
                       const int y_off, __global long* index, const int i_off,
                       const int with_index,
                       const int column_major) {{
  {_run_prologue(fixed)}
  {c.compute} best = {lowest};
  long at = -1;
  int started = 0;
  {max_walk}
  y[y_off + i] = best;
  if (with_index) index[i_off + i] = at < 0 ? -1 : (long)nc * P + at;
  }}
}}

/* MaxPool without Indices: the same maximum, a work-item per output row (row_windows). */
__kernel void max_pool_values(const int total, const int16 g, const int4 hp,
                              __global const {c.storage}* x, const int x_off,
                              __global {c.storage}* y, const int y_off) {{
  const int item = get_global_id(0);
  if (item >= total) return;
  {row_head(c.storage, fixed, "x + x_off + lead * ID * IH * IW", run)}
  {row_loops(maximum)}
}}

/* AveragePool: the window's sum over the input, divided by the count of positions inside
   [-head, size + tail) (count_include_pad) or [0, size); a work-item per output row. */
__kernel void average_pool(const int total, const int16 g, const int4 hp, const int4 tp,
                           __global const {c.storage}* x, const int x_off,
                           __global {c.storage}* y, const int y_off, const int include_pad,
                           const int grad) {{
  const int item = get_global_id(0);
  if (item >= total) return;
  {row_head(c.storage, fixed, "x + x_off + lead * ID * IH * IW", run)}
  {row_loops(average)}
}}

/* Gradients, one work-item per input element p: the windows o that reach p are those with
   o * s - h + k * d = p for some kernel offset k. */
__kernel void pool_grad(const int total, const int16 g, const int4 hp, const int4 tp,
                        __global const {c.storage}* dy, const int dy_off,
                        __global const long* index, const int i_off, __global {c.storage}* dx,
                        const int dx_off, const int mode, const int include_pad) {{
  {_input_prologue(fixed)}
  {c.compute} acc = 0;
  {_GRAD_SUM}
  dx[dx_off + i] = acc;
}}
"""


def _pool_kernel(runtime, dtype, name: str, win: Window):
    """Kernel ``name`` for windows of ``win``'s shape, strides and dilations."""
    return runtime.kernel(_pool_source(np.dtype(dtype), window_shape(win), runtime.row_run),
                          name)


def _tail(win: Window):
    import pyopencl.cltypes as cltypes

    return cltypes.make_int4(*win.tail, 0)



def _target(y):
    return y if y.is_contiguous else empty(y.runtime, y.shape, y.dtype)


def _finish(target, y):
    if target is not y:
        assign(y, target)


def max_pool_into(x, attrs, y, index=None, column_major: bool = False) -> None:
    runtime = x.runtime
    x = x.contiguous()
    win = Window.of(pool_geometry(x.shape[2:], attrs), x.shape[2:])
    target = _target(y)
    with_index = index is not None
    if not with_index:
        items = run_items(win, target.size, runtime.row_run)
        runtime.launch1d(_pool_kernel(runtime, x.dtype, "max_pool_values", win), items,
                         np.int32(items), *win.args, x.buffer, np.int32(x.offset),
                         target.buffer, np.int32(target.offset))
        _finish(target, y)
        return
    index_target = _target(index)
    runs = run_items(win, target.size, ROW_RUN)
    runtime.launch1d(_pool_kernel(runtime, x.dtype, "max_pool", win), runs,
                     np.int32(runs), *win.args, x.buffer, np.int32(x.offset),
                     target.buffer, np.int32(target.offset), index_target.buffer,
                     np.int32(index_target.offset if with_index else 0), np.int32(with_index),
                     np.int32(column_major))
    _finish(target, y)
    if with_index:
        _finish(index_target, index)


@kernel("MaxPool")
def max_pool(ctx, inputs, outputs, attrs):
    index = outputs[1] if len(outputs) > 1 else None
    max_pool_into(inputs[0], attrs, outputs[0], index, bool(attrs["storage_order"]))


@kernel("AveragePool")
def average_pool(ctx, inputs, outputs, attrs):
    x, y = inputs[0].contiguous(), outputs[0]
    win = Window.of(pool_geometry(x.shape[2:], attrs), x.shape[2:])
    target = _target(y)
    items = run_items(win, target.size, x.runtime.row_run)
    x.runtime.launch1d(_pool_kernel(x.runtime, x.dtype, "average_pool", win), items,
                       np.int32(items), *win.args, _tail(win), x.buffer,
                       np.int32(x.offset), target.buffer, np.int32(target.offset),
                       np.int32(bool(attrs["count_include_pad"])), np.int32(0))
    _finish(target, y)


def _pool_grad(dy, x_shape, attrs, dx, index, mode: int, include_pad: bool) -> None:
    runtime = dx.runtime
    dy = dy.contiguous()
    win = Window.of(pool_geometry(x_shape[2:], attrs), x_shape[2:])
    target = _target(dx)
    runtime.launch1d(_pool_kernel(runtime, dx.dtype, "pool_grad", win), target.size,
                     np.int32(target.size), *win.args, _tail(win), dy.buffer,
                     np.int32(dy.offset), index.buffer, np.int32(index.offset), target.buffer,
                     np.int32(target.offset), np.int32(mode), np.int32(include_pad))
    _finish(target, dx)


@kernel("portable.MaxPoolGrad")
def max_pool_grad(ctx, inputs, outputs, attrs):
    dy, x = inputs
    index = empty(x.runtime, dy.shape, np.int64)
    max_pool_into(x, attrs, empty(x.runtime, dy.shape, x.dtype), index)
    _pool_grad(dy, x.shape, attrs, outputs[0], index, 0, False)


@kernel("portable.AveragePoolGrad")
def average_pool_grad(ctx, inputs, outputs, attrs):
    dy = inputs[0]
    _pool_grad(dy, outputs[0].shape, attrs, outputs[0], dy, 1,
               bool(attrs["count_include_pad"]))


@kernel("GlobalAveragePool")
def global_average_pool(ctx, inputs, outputs, attrs):
    x = inputs[0]
    reduce(x, tuple(range(2, x.ndim)), "mean", True, outputs[0])


@kernel("GlobalMaxPool", half="native")
def global_max_pool(ctx, inputs, outputs, attrs):
    x = inputs[0]
    reduce(x, tuple(range(2, x.ndim)), "max", True, outputs[0])
