"""Strided copies whose innermost axis is contiguous on both sides, a row per work-item.

Transposes that keep the last axis (a channel shuffle, heads split from an attention's
projection), copies into a slice (Concat) and out of one (Slice, Split) move whole rows. The
family kernel's strided layout walks such a copy in chunks of ``codegen.CHUNK`` elements,
decoding every chunk's row and stepping by a stride known only at run time: on PoCL a
ShuffleNet channel shuffle (1x4x34x28x28) took 120-160 us that way, where NumPy takes 13-30.
Here a work-item decodes its row once and copies it with a plain loop, which the compiler
vectorises; elements are copied as their bits (unsigned integers of their width, so float16
needs no device support and NaN payloads are kept). ``elementwise.run_elementwise`` takes this
path for same-type copies (the family's Identity) with rows of ``MIN_ROW`` elements or more.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from backends.opencl.codegen import int8_arg, peel_axes
from backends.opencl.launch import Launch

MIN_ROW = 16  # shorter rows leave the copy to the strided family kernel


_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}  # elements copied as their bits


def _source(itemsize: int) -> str:
    storage = _BITS[itemsize]
    decode = peel_axes("r", "rank", "shape",
                       lambda d: f"yb += c * y_st.s{d}; xb += c * x_st.s{d};")
    return f"""
__kernel void row_copy(const int rows, const int rank, const int8 shape, const int inner,
                       __global {storage}* y, const int y_off, const int8 y_st,
                       __global const {storage}* x, const int x_off, const int8 x_st) {{
  const int row = get_global_id(0);
  if (row >= rows) return;
  int r = row, yb = y_off, xb = x_off;
  {decode}
  for (int j = 0; j < inner; ++j) y[yb + j] = x[xb + j];
}}
"""


def row_copy_launch(runtime: Any, out: Any, x: Any, dims: Sequence[int],
                    strides: Sequence[Sequence[int]]) -> Launch | None:
    """The launch copying ``x`` into ``out`` (arrays 0 and 1) laid out as ``dims`` with
    ``strides`` (``codegen.collapse``'s, out's first), or None when the rows are short or
    not contiguous on both sides."""
    if len(dims) < 2 or dims[-1] < MIN_ROW or strides[0][-1] != 1 or strides[1][-1] != 1 \
            or out.itemsize not in _BITS:
        return None
    memo = runtime.memo("row_copy")
    kernel = memo.get(out.itemsize)
    if kernel is None:
        kernel = memo[out.itemsize] = runtime.kernel(_source(out.itemsize), "row_copy")
    rows = math.prod(dims[:-1])
    launch = Launch.flat(runtime, kernel, rows)
    launch.add(np.int32(rows), np.int32(len(dims) - 1), int8_arg(dims[:-1]),
               np.int32(dims[-1]))
    launch.array(0, out)
    launch.add(int8_arg(strides[0][:-1]))
    launch.array(1, x)
    launch.add(int8_arg(strides[1][:-1]))
    return launch
