"""OpenCL kernels: ReduceSum/Mean/Max/Min and ArgMax/ArgMin, on the generated reductions;
TopK; CumSum and CumProd."""
from __future__ import annotations

import numpy as np

from portable.ops.reduce import cumsum_axis, reduced_axes

from backends.opencl.allocator import empty, host_value
from backends.opencl.elementwise import apply, assign
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()


def _axes(inputs, attrs):
    axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    return reduced_axes(inputs[0].ndim, None if axes is None else host_value(axes),
                        attrs["noop_with_empty_axes"])


def _reduce_kernel(op_name: str):
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(inputs, attrs)
        if not axes:
            assign(out, x)  # noop_with_empty_axes with no axes: identity
            return
        reduce(x, axes, op_name, bool(attrs["keepdims"]), out)
    run.__name__ = f"reduce_{op_name}"
    return run


for _op, _name in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"),
                   ("ReduceMin", "min")):
    kernel(_op, half="native")(_reduce_kernel(_name))


def _norm_kernel(name: str, before: str | None, reduce_name: str, after: str | None,
                 alone: str | None):
    """``after(reduce(before(x)))``; with noop_with_empty_axes and no axes, ``alone(x)``:
    the elementwise part ONNX still applies."""
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(inputs, attrs)
        if not axes:
            assign(out, x) if alone is None else apply(alone, x, out=out)
            return
        reduce(x if before is None else apply(before, x), axes, reduce_name,
               bool(attrs["keepdims"]), out)
        if after is not None:
            apply(after, out, out=out)
    run.__name__ = name
    return run


# (sumsq squares as it reduces: no temporary)
for _op, _parts in (("ReduceSumSquare", (None, "sumsq", None, "Square")),
                    ("ReduceL2", (None, "sumsq", "Sqrt", "Abs")),
                    ("ReduceL1", ("Abs", "sum", None, "Abs")),
                    ("ReduceProd", (None, "prod", None, None)),
                    ("ReduceLogSum", (None, "sum", "Log", "Log"))):
    kernel(_op, half="native")(_norm_kernel(_op, *_parts))


@kernel("ReduceLogSumExp", half="native")
def reduce_log_sum_exp(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(inputs, attrs)
    if not axes:
        assign(out, x)
        return
    # shifted by the largest element, so exp cannot overflow (a non-finite one shifts by 0)
    top = reduce(x, axes, "max", True)
    top = apply("Where", apply("Less", apply("Abs", top), np.inf), top, 0.0)
    total = reduce(apply("Exp", apply("Sub", x, top)), axes, "sum", bool(attrs["keepdims"]))
    apply("Add", apply("Log", total), top.reshape(total.shape), out=out)


def _arg_kernel(op_name: str):
    def run(ctx, inputs, outputs, attrs):
        x = inputs[0]
        reduce(x, (attrs["axis"] % x.ndim,), op_name, bool(attrs["keepdims"]), outputs[0],
               select_last=bool(attrs["select_last_index"]))
    run.__name__ = op_name
    return run


kernel("ArgMax", half="native")(_arg_kernel("argmax"))
kernel("ArgMin", half="native")(_arg_kernel("argmin"))


# -- TopK ------------------------------------------------------------------------------------
# One work-item per element: its rank is how many elements of its row come before it (larger,
# or equal at a lower index, for largest=1); ranks below K land at that position. O(n) per
# element, no sorting network: fine for the rows TopK usually sees (classes, candidates).

_TOPK = """
__kernel void topk(const int total, const int n, const int inner, const int k,
                   const int largest, __global const {T}* x, const int x_off,
                   __global {T}* values, const int v_off, __global long* indices,
                   const int i_off) {{
  const int e = get_global_id(0);
  if (e >= total) return;
  const int in_ = e % inner;
  const int i = (e / inner) % n;
  const int outer = e / (inner * n);
  const int base = x_off + outer * n * inner + in_;
  const {T} mine = x[base + i * inner];
  int rank = 0;
  for (int j = 0; j < n; ++j) {{
    const {T} other = x[base + j * inner];
    const int ahead = largest ? (other > mine) : (other < mine);
    rank += ahead || (other == mine && j < i);
  }}
  if (rank < k) {{
    const int at = (outer * k + rank) * inner + in_;
    values[v_off + at] = mine;
    indices[i_off + at] = i;
  }}
}}
"""


def _inner(shape, axis):
    return int(np.prod(shape[axis + 1:], dtype=np.int64))


@kernel("TopK")
def topk(ctx, inputs, outputs, attrs):
    x, values, indices = inputs[0].contiguous(), outputs[0], outputs[1]
    axis = attrs["axis"] % x.ndim
    if values.size == 0:
        return
    runtime = x.runtime
    out_v = values if values.is_contiguous else empty(runtime, values.shape, values.dtype)
    out_i = indices if indices.is_contiguous else empty(runtime, indices.shape, indices.dtype)
    program = preamble([x.dtype]) + _TOPK.format(T=ctype(x.dtype).storage)
    runtime.launch1d(runtime.kernel(program, "topk"), x.size, np.int32(x.size),
                     np.int32(x.shape[axis]), np.int32(max(_inner(x.shape, axis), 1)),
                     np.int32(values.shape[axis]), np.int32(bool(attrs["largest"])),
                     x.buffer, np.int32(x.offset), out_v.buffer, np.int32(out_v.offset),
                     out_i.buffer, np.int32(out_i.offset))
    for target, result in ((values, out_v), (indices, out_i)):
        if target is not result:
            assign(target, result)


# -- CumSum and CumProd: one work-item per row along the axis, in order (the same order every
# run, in the compute type) ------------------------------------------------------------------

_SCAN = """
__kernel void scan(const int rows, const int n, const int inner, const int exclusive,
                     const int reverse, __global const {T}* x, const int x_off,
                     __global {T}* y, const int y_off) {{
  const int r = get_global_id(0);
  if (r >= rows) return;
  const int base = (r / inner) * n * inner + r % inner;
  {A} acc = {IDENTITY};
  for (int k = 0; k < n; ++k) {{
    const int at = base + (reverse ? n - 1 - k : k) * inner;
    const {A} value = x[x_off + at];
    if (!exclusive) acc {OP}= value;
    y[y_off + at] = acc;
    if (exclusive) acc {OP}= value;
  }}
}}
"""


def _scan(op: str, identity: int):
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0].contiguous(), outputs[0]
        if out.size == 0:
            return
        axis = cumsum_axis(host_value(inputs[1]), x.ndim)
        runtime = x.runtime
        target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
        c = ctype(x.dtype)
        program = preamble([x.dtype]) + _SCAN.format(T=c.storage, A=c.compute, OP=op,
                                                      IDENTITY=identity)
        inner = max(_inner(x.shape, axis), 1)
        rows = x.size // max(x.shape[axis], 1)
        runtime.launch1d(runtime.kernel(program, "scan"), rows, np.int32(rows),
                         np.int32(x.shape[axis]), np.int32(inner), np.int32(attrs["exclusive"]),
                         np.int32(attrs["reverse"]), x.buffer, np.int32(x.offset),
                         target.buffer, np.int32(target.offset))
        if target is not out:
            assign(out, target)
    run.__name__ = "cumsum" if op == "+" else "cumprod"
    return run


kernel("CumSum")(_scan("+", 0))
kernel("CumProd")(_scan("*", 1))
