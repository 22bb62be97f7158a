"""NumPy kernels: elementwise ops, written against ``ctx.xp`` in destination-passing style."""
from __future__ import annotations

from portable.dtypes import from_onnx

from backends.numpy.kernels.table import kernel_table

kernels, kernel = kernel_table()

# op -> name of the array-namespace function that computes it with ``out=``
_UFUNCS = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Neg": "negative", "Exp": "exp",
    "Greater": "greater",
}


def _ufunc_kernel(fn_name: str):
    def run(ctx, inputs, outputs, attrs):
        getattr(ctx.xp, fn_name)(*inputs, out=outputs[0])
    run.__name__ = fn_name
    return run


for _op, _fn in _UFUNCS.items():
    kernel(_op)(_ufunc_kernel(_fn))


@kernel("Div")
def div(ctx, inputs, outputs, attrs):
    a, b = inputs
    if a.dtype.kind in "iu":
        # ONNX integer division truncates toward zero (C semantics), NumPy floors.
        outputs[0][...] = ctx.xp.trunc(a / b).astype(a.dtype)
    else:
        ctx.xp.divide(a, b, out=outputs[0])


@kernel("Relu")
def relu(ctx, inputs, outputs, attrs):
    ctx.xp.maximum(inputs[0], 0, out=outputs[0])


@kernel("Cast")
def cast(ctx, inputs, outputs, attrs):
    outputs[0][...] = inputs[0].astype(from_onnx(attrs["to"]))
