"""OpenCL kernel: CenterCropPad, one strided copy of the centred window of
``portable.ops.crop`` (any dtype: a copy needs no arithmetic)."""
from __future__ import annotations

from portable.ops.crop import crop_pad_slices

from backends.opencl.elementwise import assign
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


@kernel("CenterCropPad", half="native")
def center_crop_pad(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    crop, pad = crop_pad_slices(x.shape, y.shape)
    if any(n > m for n, m in zip(y.shape, x.shape)):  # some axis is padded with zeros
        assign(y, 0)
    if y[pad].size:
        assign(y[pad], x[crop])
