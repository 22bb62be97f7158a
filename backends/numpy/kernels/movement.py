"""NumPy kernels: movement ops."""
from __future__ import annotations

from backends.numpy.kernels.table import kernel_table

kernels, kernel = kernel_table()


@kernel("Reshape", "Identity")
def reshape(ctx, inputs, outputs, attrs):
    # Only runs when the planner could not alias the output to the input (a view op).
    outputs[0][...] = ctx.xp.reshape(inputs[0], outputs[0].shape)


@kernel("ConstantOfShape")
def constant_of_shape(ctx, inputs, outputs, attrs):
    value = attrs["value"]
    outputs[0][...] = 0 if value is None else value.reshape(())


@kernel("Expand")
def expand(ctx, inputs, outputs, attrs):
    outputs[0][...] = inputs[0]


@kernel("Transpose")
def transpose(ctx, inputs, outputs, attrs):
    perm = attrs["perm"]
    outputs[0][...] = ctx.xp.transpose(inputs[0], None if perm is None else tuple(perm))
