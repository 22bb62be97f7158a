"""OpenCL kernels: LpPool, GlobalLpPool and MaxUnpool.

LpPool is one work-item per output window walking its window with the shared C of
``window.py`` (``over_window``: padding skipped, which is what counting it as zero means),
summing ``|x|^p`` and taking the p-th root. GlobalLpPool composes the reduction kernels.
MaxUnpool scatters: one work-item per input element writes its value at its index (MaxPool's
indices never repeat with different values, so the order of writes does not matter).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from portable.errors import BackendError
from portable.ops.conv import pool_geometry
from portable.ops.pooling_extra import unpool_shape

from backends.opencl.allocator import empty
from backends.opencl.elementwise import apply, assign
from backends.opencl.kernels.table import kernel_table
from backends.opencl.kernels.window import GEOMETRY, OUTPUT_POSITION, Window, over_window
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()

_LP_SUM = over_window("acc += pown(fabs(x[x_off + nc * P + (pd * IH + ph) * IW + pw]), p);")


@lru_cache(maxsize=None)
def _source(dtype: np.dtype) -> str:
    c = ctype(dtype)
    return preamble([dtype]) + f"""
/* LpPool: y = (sum over the window's input elements of |x|^p)^(1/p). */
__kernel void lp_pool(const int total, const int16 g, const int4 hp, const int p,
                      __global const {c.storage}* x, const int x_off,
                      __global {c.storage}* y, const int y_off) {{
  const int i = get_global_id(0);
  if (i >= total) return;
  {GEOMETRY}
  const int O = OD * OH * OW, P = ID * IH * IW;
  const int o = i % O, nc = i / O;
  {OUTPUT_POSITION}
  {c.compute} acc = 0;
  {_LP_SUM}
  y[y_off + i] = p == 1 ? acc : p == 2 ? sqrt(acc) : pow(acc, ({c.compute})1 / p);
}}

/* MaxUnpool: y[index[e]] = x[e] over the zeroed unpooled block; bad flags indices outside. */
__kernel void max_unpool(const int total, const long size, __global const {c.storage}* x,
                         const int x_off, __global const long* index, const int i_off,
                         __global {c.storage}* y, const int y_off, __global int* bad) {{
  const int e = get_global_id(0);
  if (e >= total) return;
  const long k = index[i_off + e];
  if (k < 0 || k >= size) {{ bad[0] = 1; return; }}
  y[y_off + k] = x[x_off + e];
}}
"""


def _program(runtime, dtype, name: str):
    return runtime.kernel(_source(np.dtype(dtype)), name)


@kernel("LpPool")
def lp_pool(ctx, inputs, outputs, attrs):
    x, y = inputs[0].contiguous(), outputs[0]
    runtime = x.runtime
    win = Window.of(pool_geometry(x.shape[2:], attrs), x.shape[2:])
    target = y if y.is_contiguous else empty(runtime, y.shape, y.dtype)
    runtime.launch1d(_program(runtime, x.dtype, "lp_pool"), target.size, np.int32(target.size),
                     *win.args, np.int32(attrs["p"]), x.buffer, np.int32(x.offset),
                     target.buffer, np.int32(target.offset))
    if target is not y:
        assign(y, target)


@kernel("GlobalLpPool")
def global_lp_pool(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    p = attrs["p"]
    spatial = tuple(range(2, x.ndim))
    if p == 2:
        reduce(x, spatial, "sumsq", True, y)
        apply("Sqrt", y, out=y)
        return
    reduce(apply("Pow", apply("Abs", x), float(p)), spatial, "sum", True, y)
    if p != 1:
        apply("Pow", y, 1.0 / p, out=y)


@kernel("MaxUnpool")
def max_unpool(ctx, inputs, outputs, attrs):
    x, index, y = inputs[0].contiguous(), inputs[1].contiguous(), outputs[0]
    runtime = x.runtime
    shape = unpool_shape(x.shape, attrs)
    whole = tuple(y.shape) == shape and y.is_contiguous
    block = y if whole else empty(runtime, shape, y.dtype)
    assign(block, 0)
    if x.size:
        bad = empty(runtime, (1,), np.int32)
        assign(bad, 0)
        size = int(np.prod(shape, dtype=np.int64))
        runtime.launch1d(_program(runtime, x.dtype, "max_unpool"), x.size, np.int32(x.size),
                         np.int64(size), x.buffer, np.int32(x.offset), index.buffer,
                         np.int32(index.offset), block.buffer, np.int32(block.offset),
                         bad.buffer)
        if bad.item():
            raise BackendError(f"MaxUnpool: indices must lie in [0, {size}) for the unpooled "
                               f"shape {shape}")
    if not whole:
        assign(y, 0)
        assign(y[tuple(slice(0, n) for n in shape)], block)
