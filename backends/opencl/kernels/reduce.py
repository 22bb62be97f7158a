"""OpenCL kernels: ReduceSum/Mean/Max/Min and ArgMax/ArgMin, on the generated reductions."""
from __future__ import annotations

from portable.ops.reduce import reduced_axes

from backends.opencl.allocator import host_value
from backends.opencl.arrayops import assign
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce

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


def _arg_kernel(op_name: str):
    def run(ctx, inputs, outputs, attrs):
        x = inputs[0]
        reduce(x, (attrs["axis"] % x.ndim,), op_name, bool(attrs["keepdims"]), outputs[0],
               select_last=bool(attrs["select_last_index"]))
    run.__name__ = op_name
    return run


kernel("ArgMax", half="native")(_arg_kernel("argmax"))
kernel("ArgMin", half="native")(_arg_kernel("argmin"))
