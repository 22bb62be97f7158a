"""OpenCL kernel: Resize, running the per-axis plan of ``portable.ops.resize`` as one Gather
per tap and elementwise weighting (float32, or the data's float type)."""
from __future__ import annotations

import numpy as np

from portable.ops.resize import plans

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.elementwise import apply, assign
from backends.opencl.gather import gather_axis
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


@kernel("Resize")
def resize(ctx, inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    runtime = x.runtime
    known = [None if len(inputs) <= i or inputs[i] is None else np.asarray(host_value(inputs[i]))
             for i in (1, 2, 3)]
    value = x if x.dtype.kind == "f" else apply("Cast", x, dtype=np.float32)
    for plan in plans(attrs, x.shape, *known):
        shape = list(value.shape)
        shape[plan.axis] = len(plan.index)
        spread = [1] * len(shape)
        spread[plan.axis] = len(plan.index)
        total = None
        for tap in range(plan.index.shape[1]):
            gathered = empty(runtime, shape, value.dtype)
            gather_axis(value, from_numpy(runtime, plan.index[:, tap]), plan.axis, gathered)
            term = apply("Mul", gathered, plan.weight[:, tap].astype(value.dtype).reshape(spread))
            total = term if total is None else apply("Add", total, term)
        if plan.outside is not None:
            total = apply("Where", plan.outside.reshape(spread),
                          value.dtype.type(attrs["extrapolation_value"]), total)
        value = total
    if out.dtype.kind in "iu":
        info = np.iinfo(out.dtype)
        value = apply("Min", apply("Max", apply("Round", value), float(info.min)),
                      float(info.max))
    assign(out, value)
