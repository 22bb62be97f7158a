"""Generated reduction kernels: sum, mean, max, min, product, arg-max/min over any axes.

Stages of ``reduce``:
1. Permute the input view so kept axes come first and reduced axes last; merge neighbouring
   axes of each group (a contiguous input reduced over trailing axes becomes (M, R)). More
   than three reduced groups are first copied contiguous.
2. One work-item per output element walks its reduced elements (three nested loops whose
   sizes and strides are kernel arguments).
3. Few outputs over long rows would leave the device idle: the rows are cut into chunks, one
   work-item per chunk writes a partial result, and a second pass over the partials finishes.

Accumulators are float for float16 and float32 input, double for float64, the type itself for
integers; max/min propagate NaN and start from -inf/+inf (integers: the dtype's limits), as an
empty ONNX reduction does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.allocator import CLArray, contiguous_strides, empty
from backends.opencl.codegen import MAX_RANK, collapse, int8_arg, peel_axes
from backends.opencl.elementwise import assign, copy
from backends.opencl.scalars import ctype, limits, preamble

_PARALLEL_OUTPUTS = 1024  # below this many outputs, long rows are split into chunks
_CHUNK_MIN = 512          # elements a chunk reduces at least


@dataclass(frozen=True)
class ReduceOp:
    """How one reduction starts, combines, and finishes (templates over acc, v, count)."""

    name: str
    init: str            # "zero", "one", "lowest", "highest"
    combine: str         # C statement updating ``acc`` with ``v``
    final: str = "acc"   # C expression of the result from ``acc`` and ``count``
    arg: bool = False    # also track the index of the chosen element


# NAN_WINS becomes "a NaN replaces a number" for floats (np.max propagates NaN), 0 otherwise.
_NAN_MAX = "if (v > acc || NAN_WINS) acc = v;"
_NAN_MIN = "if (v < acc || NAN_WINS) acc = v;"
OPS = {
    "sum": ReduceOp("sum", "zero", "acc += v;"),
    "prod": ReduceOp("prod", "one", "acc *= v;"),
    "mean": ReduceOp("mean", "zero", "acc += v;", final="acc / count"),
    "max": ReduceOp("max", "lowest", _NAN_MAX),
    "min": ReduceOp("min", "highest", _NAN_MIN),
    "sumsq": ReduceOp("sumsq", "zero", "acc += v * v;"),
    "meansq": ReduceOp("meansq", "zero", "acc += v * v;", final="acc / count"),
    "argmax": ReduceOp("argmax", "lowest", "", arg=True),
    "argmin": ReduceOp("argmin", "highest", "", arg=True),
}
# After a chunked first pass, partial results combine with this op.
_SECOND_PASS = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "max", "min": "min",
                "sumsq": "sum", "meansq": "mean"}


def _acc_dtype(dtype: np.dtype, op: ReduceOp) -> np.dtype:
    if dtype.kind == "f":
        return np.dtype(np.float64 if dtype.itemsize == 8 else np.float32)
    if dtype.kind == "b":  # counts for sums; max/min keep bool (an empty max is False)
        return np.dtype(np.int64) if op.name in ("sum", "mean", "prod") else dtype
    if op.name in ("sum", "prod", "sumsq", "mean", "meansq") and dtype.itemsize < 8:
        return np.dtype(np.int64 if dtype.kind == "i" else np.uint64)
    return dtype


_CODES = {name: k for k, name in enumerate(OPS)}


def _source(x_dtype, acc_dtype, y_dtype) -> str:
    """The program of one (input, accumulator, output) dtype: ``reduce`` switches over the
    value reductions by op code, ``reduce_arg`` is arg-max/min (``select_last`` an argument).
    One program per dtype triple keeps compilation (slow on PoCL) to a few programs."""
    xc, ac, yc = ctype(x_dtype), ctype(acc_dtype), ctype(y_dtype)
    low, high = limits(acc_dtype)
    starts = {"zero": "0", "one": "1", "lowest": low, "highest": high}
    init = " ".join(f"case {_CODES[n]}: acc = {starts[op.init]}; break;"
                    for n, op in OPS.items() if not op.arg)
    nan = "(isnan(v) && !isnan(acc))" if ac.is_float else "0"
    combine = " ".join(f"case {_CODES[n]}: {op.combine.replace('NAN_WINS', nan)} break;"
                       for n, op in OPS.items() if not op.arg)
    final = " ".join(f"case {_CODES[n]}: acc = {op.final}; break;"
                     for n, op in OPS.items() if not op.arg and op.final != "acc")
    arg_combine = (f"if ((op == {_CODES['argmax']} ? (last ? v >= acc : v > acc) : "
                   f"(last ? v <= acc : v < acc)) || {nan}) {{ acc = v; best = k; }}")
    kernels = []
    for name, y_type, start, update, finish in (
            ("reduce", yc.storage, f"switch (op) {{ {init} }}",
             f"switch (op) {{ {combine} }}",
             f"if (finish) {{ switch (op) {{ {final} }} }} "
             + yc.store("y", "yo", "acc") + ";"),
            ("reduce_arg", "long",
             f"acc = op == {_CODES['argmax']} ? {low} : {high};", arg_combine,
             "y[yo] = best;")):
        kernels.append(f"""
__kernel void {name}(const int M, const int krank, const int8 kshape,
                     __global const {xc.storage}* x, const int x_off, const int8 x_kst,
                     const int R0, const int R1, const int R2,
                     const int s0, const int s1, const int s2,
                     const int chunks, const int chunk_len, const {ac.compute} count,
                     __global {y_type}* y, const int y_off, const int8 y_kst,
                     const int op, const int finish, const int last) {{
  const int gid = get_global_id(0);
  if (gid >= M * chunks) return;
  const int m = gid / chunks;
  const int part = gid - m * chunks;
  int r = m, xo = x_off, yo = y_off;
  {_DECODE}
  yo += part;
  {ac.compute} acc;
  {start}
  long best = 0;
  const int begin = part * chunk_len;
  const int end = min(R0, begin + chunk_len);
  for (int i0 = begin; i0 < end; ++i0) {{
    for (int i1 = 0; i1 < R1; ++i1) {{
      const int base = xo + i0 * s0 + i1 * s1;
      for (int i2 = 0; i2 < R2; ++i2) {{
        const {ac.compute} v = ({ac.compute}){xc.load("x", "base + i2 * s2")};
        const long k = ((long)i0 * R1 + i1) * R2 + i2;
        {update}
      }}
    }}
  }}
  {finish}
}}
""")
    return preamble([x_dtype, acc_dtype, y_dtype]) + "".join(kernels)


_DECODE = peel_axes("r", "krank", "kshape",
                    lambda d: f"xo += c * x_kst.s{d}; yo += c * y_kst.s{d};")


def _kernel(runtime, arg: bool, x_dtype, acc_dtype, y_dtype):
    memo = runtime.memo("reduce_kernels")
    key = (arg, x_dtype.name, acc_dtype.name, y_dtype.name)
    kernel = memo.get(key)
    if kernel is None:
        value_y = y_dtype if not arg else acc_dtype
        source = _source(x_dtype, acc_dtype, value_y)
        kernel = memo[key] = runtime.kernel(source, "reduce_arg" if arg else "reduce")
    return kernel


def reduce(x: CLArray, axes: Sequence[int] | None, op_name: str, keepdims: bool = False,
           out: CLArray | None = None, dtype: Any = None, select_last: bool = False) -> CLArray:
    """Reduce ``x`` over ``axes`` (None: all) with ``op_name`` (sum, mean, max, min, prod,
    sumsq, argmax, argmin); writes ``out`` (allocated when None) and returns it."""
    op = OPS[op_name]
    rank = x.ndim
    axes = tuple(range(rank)) if axes is None else \
        tuple(sorted({int(a) % max(rank, 1) for a in axes}))
    kept = [a for a in range(rank) if a not in axes]
    out_shape = tuple(1 if a in axes else x.shape[a] for a in range(rank)) if keepdims else \
        tuple(x.shape[a] for a in kept)
    if op.arg:
        y_dtype = np.dtype(np.int64)
    else:
        y_dtype = np.dtype(dtype) if dtype is not None else (
            np.dtype(np.int64) if x.dtype.kind == "b" and op.name == "sum" else x.dtype)
    if out is None:
        out = empty(x.runtime, out_shape, y_dtype)
    elif tuple(out.shape) != out_shape:
        raise BackendError(f"reduce {op_name}: out has shape {out.shape}, expected {out_shape}")
    x.runtime.touch(out)
    if out.size == 0:
        return out
    acc_dtype = _acc_dtype(x.dtype, op)
    out_kept = [out.strides[a] for a in kept] if keepdims else list(out.strides)
    k_shape = [x.shape[a] for a in kept]
    k_dims, (x_kst, y_kst) = collapse(k_shape, [[x.strides[a] for a in kept], out_kept])
    r_dims, (r_st,) = collapse([x.shape[a] for a in axes], [[x.strides[a] for a in axes]])
    if len(r_dims) > 3:  # copy so the reduced axes merge into one
        moved = copy(x.transpose(kept + list(axes)))
        return _reduce_copied(moved, len(kept), op_name, out, dtype, select_last, k_shape)
    if len(k_dims) > MAX_RANK:
        raise BackendError(f"reduction keeps {len(k_dims)} non-mergeable axes (at most "
                           f"{MAX_RANK})")
    r_dims = list(r_dims) + [1] * (3 - len(r_dims))
    r_st = list(r_st) + [0] * (3 - len(r_st))
    M, R = math.prod(k_dims), math.prod(r_dims)
    runtime = x.runtime
    count = ctype(acc_dtype).scalar(max(R, 0) if op.name in ("mean", "meansq") else 1)
    chunks = 1
    if not op.arg and M < _PARALLEL_OUTPUTS and r_dims[0] >= 2 * _CHUNK_MIN:
        chunks = min(-(-_PARALLEL_OUTPUTS // M), r_dims[0] // _CHUNK_MIN)
    chunk_len = -(-r_dims[0] // chunks)
    chunks = -(-r_dims[0] // chunk_len) if r_dims[0] else 1
    target, t_off, t_kst = out, out.offset, y_kst
    if chunks > 1:
        target = empty(runtime, (M, chunks), acc_dtype)
        t_off, t_kst = 0, [s * chunks for s in contiguous_strides(k_dims)]
    kernel = _kernel(runtime, op.arg, x.dtype, acc_dtype,
                     target.dtype if chunks > 1 else y_dtype)
    runtime.launch1d(kernel, M * chunks, np.int32(M), np.int32(len(k_dims)), int8_arg(k_dims),
                     x.buffer, np.int32(x.offset), int8_arg(x_kst),
                     *[np.int32(v) for v in r_dims], *[np.int32(v) for v in r_st],
                     np.int32(chunks), np.int32(chunk_len), count,
                     target.buffer, np.int32(t_off), int8_arg(t_kst), np.int32(_CODES[op_name]),
                     np.int32(chunks == 1), np.int32(select_last))
    if chunks > 1:
        second = OPS[_SECOND_PASS[op_name]]
        kernel = _kernel(runtime, False, acc_dtype, acc_dtype, y_dtype)
        count = ctype(acc_dtype).scalar(R if second.name == "mean" else 1)
        runtime.launch1d(kernel, M, np.int32(M), np.int32(len(k_dims)), int8_arg(k_dims),
                         target.buffer, np.int32(0), int8_arg(_contiguous_times(k_dims, chunks)),
                         np.int32(chunks), np.int32(1), np.int32(1),   # R0, R1, R2
                         np.int32(1), np.int32(0), np.int32(0),        # s0, s1, s2
                         np.int32(1), np.int32(chunks), count,         # chunks, chunk_len
                         out.buffer, np.int32(out.offset), int8_arg(y_kst),
                         np.int32(_CODES[second.name]), np.int32(1), np.int32(0))
    return out


def _reduce_copied(moved, n_kept, op_name, out, dtype, select_last, k_shape):
    """Reduce a contiguous copy whose reduced axes are last; ``out`` keeps its layout."""
    flat = moved.reshape(list(k_shape) + [-1])
    result = reduce(flat, [n_kept], op_name, False, None, dtype, select_last)
    assign(out, result.reshape(out.shape))
    return out


def _contiguous_times(dims, factor):
    return [s * factor for s in contiguous_strides(dims)]
