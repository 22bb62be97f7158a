"""NumPy kernel: CenterCropPad, copying the centred window of ``portable.ops.crop``."""
from __future__ import annotations

from portable.ops.crop import crop_pad_slices

from portable.backend import kernel_table

kernels, kernel = kernel_table()


@kernel("CenterCropPad")
def center_crop_pad(ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    crop, pad = crop_pad_slices(x.shape, y.shape)
    if any(n > m for n, m in zip(y.shape, x.shape)):  # some axis is padded with zeros
        y[...] = 0
    y[pad] = x[crop]
