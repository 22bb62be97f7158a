"""NumPy kernels: reductions."""
from __future__ import annotations

from portable.ops.reduce import reduced_axes

from backends.numpy.kernels.table import kernel_table

kernels, kernel = kernel_table()


def _axes(inputs, attrs):
    axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    return reduced_axes(inputs[0].ndim, None if axes is None else axes,
                        attrs["noop_with_empty_axes"])


@kernel("ReduceSum")
def reduce_sum(ctx, inputs, outputs, attrs):
    axes = _axes(inputs, attrs)
    if not axes:
        outputs[0][...] = inputs[0]
        return
    ctx.xp.sum(inputs[0], axis=axes, keepdims=bool(attrs["keepdims"]), out=outputs[0])
