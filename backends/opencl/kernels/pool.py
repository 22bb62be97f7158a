"""OpenCL kernels: MaxPool (with Indices), AveragePool, their gradients, global pools.

One work-item per output window walks the window, skipping padding (max pooling never picks
padding; average pooling divides by the count ONNX prescribes). Gradients run in gather form
over the input: MaxPoolGrad first records each window's first maximum (MaxPool's Indices),
then each input element sums dY over the windows whose maximum it is; AveragePoolGrad sums
dY / count over the windows that reach it. No atomics, so results are deterministic.
"""
from __future__ import annotations

import numpy as np

from portable.ops.conv import pool_geometry

from backends.opencl.allocator import empty
from backends.opencl.elementwise import assign
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.window import GEOMETRY, Window
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, limits, preamble

kernels, kernel = kernel_table()

_SOURCE = """
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
                       __global const {S}* x, const int x_off, __global {S}* y,
                       const int y_off, __global long* index, const int i_off,
                       const int with_index,
                       const int column_major) {{
  const int i = get_global_id(0);
  if (i >= total) return;
  {GEOMETRY}
  const int O = OD * OH * OW, P = ID * IH * IW;
  const int o = i % O, nc = i / O;
  const int ow = o % OW, oh = (o / OW) % OH, od = o / (OW * OH);
  {T} best = {LOWEST};
  long at = -1;
  int started = 0;
  for (int kd = 0; kd < KD; ++kd) {{
    const int pd = od * SD - HD + kd * DD;
    for (int kh = 0; kh < KH; ++kh) {{
      const int ph = oh * SH - HH + kh * DH;
      for (int kw = 0; kw < KW; ++kw) {{
        const int pw = ow * SW - HW + kw * DW;
        const int valid = pd >= 0 && pd < ID && ph >= 0 && ph < IH && pw >= 0 && pw < IW;
        const {T} v = valid ? x[x_off + nc * P + (pd * IH + ph) * IW + pw] : {LOWEST};
        if (!started || v > best) {{  /* the first maximum, padding included (np.argmax) */
          started = 1;
          best = v;
          at = valid ? (column_major ? (pw * IH + ph) * ID + pd : (pd * IH + ph) * IW + pw)
                     : -1;
        }}
      }}
    }}
  }}
  y[y_off + i] = best;
  if (with_index) index[i_off + i] = at < 0 ? -1 : (long)nc * P + at;
}}

/* AveragePool: the window's sum over the input, divided by the count of positions inside
   [-head, size + tail) (count_include_pad) or [0, size). */
__kernel void average_pool(const int total, const int16 g, const int4 hp, const int4 tp,
                           __global const {S}* x, const int x_off, __global {S}* y,
                           const int y_off, const int include_pad, const int grad) {{
  const int i = get_global_id(0);
  if (i >= total) return;
  {GEOMETRY}
  const int O = OD * OH * OW, P = ID * IH * IW;
  const int o = i % O, nc = i / O;
  const int ow = o % OW, oh = (o / OW) % OH, od = o / (OW * OH);
  {T} acc = 0;
  for (int kd = 0; kd < KD; ++kd) {{
    const int pd = od * SD - HD + kd * DD;
    if (pd < 0 || pd >= ID) continue;
    for (int kh = 0; kh < KH; ++kh) {{
      const int ph = oh * SH - HH + kh * DH;
      if (ph < 0 || ph >= IH) continue;
      for (int kw = 0; kw < KW; ++kw) {{
        const int pw = ow * SW - HW + kw * DW;
        if (pw < 0 || pw >= IW) continue;
        acc += x[x_off + nc * P + (pd * IH + ph) * IW + pw];
      }}
    }}
  }}
  const int count =
      inside(od, SD, HD, KD, DD, include_pad ? -HD : 0, include_pad ? ID + tp.s0 : ID) *
      inside(oh, SH, HH, KH, DH, include_pad ? -HH : 0, include_pad ? IH + tp.s1 : IH) *
      inside(ow, SW, HW, KW, DW, include_pad ? -HW : 0, include_pad ? IW + tp.s2 : IW);
  y[y_off + i] = acc / count;
}}

/* Gradients, one work-item per input element p: the windows o that reach p are those with
   o * s - h + k * d = p for some kernel offset k. */
__kernel void pool_grad(const int total, const int16 g, const int4 hp, const int4 tp,
                        __global const {S}* dy, const int dy_off, __global const long* index,
                        const int i_off, __global {S}* dx, const int dx_off, const int mode,
                        const int include_pad) {{
  const int i = get_global_id(0);
  if (i >= total) return;
  {GEOMETRY}
  const int O = OD * OH * OW, P = ID * IH * IW;
  const int p = i % P, nc = i / P;
  const int pw = p % IW, ph = (p / IW) % IH, pd = p / (IW * IH);
  {T} acc = 0;
  for (int kd = 0; kd < KD; ++kd) {{
    const int td = pd + HD - kd * DD;
    if (td < 0 || td % SD || td / SD >= OD) continue;
    for (int kh = 0; kh < KH; ++kh) {{
      const int th = ph + HH - kh * DH;
      if (th < 0 || th % SH || th / SH >= OH) continue;
      for (int kw = 0; kw < KW; ++kw) {{
        const int tw = pw + HW - kw * DW;
        if (tw < 0 || tw % SW || tw / SW >= OW) continue;
        const int od = td / SD, oh = th / SH, ow = tw / SW;
        const int o = (od * OH + oh) * OW + ow;
        if (mode == 0) {{  /* max: this element must be the window's recorded maximum */
          if (index[i_off + nc * O + o] == (long)nc * P + p) acc += dy[dy_off + nc * O + o];
        }} else {{
          const int count =
            inside(od, SD, HD, KD, DD, include_pad ? -HD : 0, include_pad ? ID + tp.s0 : ID) *
            inside(oh, SH, HH, KH, DH, include_pad ? -HH : 0, include_pad ? IH + tp.s1 : IH) *
            inside(ow, SW, HW, KW, DW, include_pad ? -HW : 0, include_pad ? IW + tp.s2 : IW);
          acc += dy[dy_off + nc * O + o] / count;
        }}
      }}
    }}
  }}
  dx[dx_off + i] = acc;
}}
"""


def _pool_kernel(runtime, dtype, name: str):
    c = ctype(dtype)
    lowest = limits(dtype)[0]
    source = preamble([dtype]) + _SOURCE.format(S=c.storage, T=c.compute, LOWEST=lowest,
                                                GEOMETRY=GEOMETRY)
    return runtime.kernel(source, name)


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
    index_target = _target(index) if with_index else target
    runtime.launch1d(_pool_kernel(runtime, x.dtype, "max_pool"), target.size,
                     np.int32(target.size), *win.args, x.buffer, np.int32(x.offset),
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
    x.runtime.launch1d(_pool_kernel(x.runtime, x.dtype, "average_pool"), target.size,
                       np.int32(target.size), *win.args, _tail(win), x.buffer,
                       np.int32(x.offset), target.buffer, np.int32(target.offset),
                       np.int32(bool(attrs["count_include_pad"])), np.int32(0))
    _finish(target, y)


def _pool_grad(dy, x_shape, attrs, dx, index, mode: int, include_pad: bool) -> None:
    runtime = dx.runtime
    dy = dy.contiguous()
    win = Window.of(pool_geometry(x_shape[2:], attrs), x_shape[2:])
    target = _target(dx)
    runtime.launch1d(_pool_kernel(runtime, dx.dtype, "pool_grad"), target.size,
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
