"""NumPy kernel: Resize, running the per-axis plan of ``portable.ops.resize``."""
from __future__ import annotations

import numpy as np

from portable.ops.resize import plans

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _host(ctx, inputs, index):
    given = inputs[index] if len(inputs) > index else None
    return None if given is None else ctx.backend.to_numpy(given)


@kernel("Resize")
def resize(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    value = x.astype(np.float64)  # (as ONNX's reference computes, then casts back)
    for plan in plans(attrs, x.shape, *(_host(ctx, inputs, i) for i in (1, 2, 3))):
        shape = [1] * value.ndim
        shape[plan.axis] = len(plan.index)
        total = 0
        for tap in range(plan.index.shape[1]):
            weight = xp.asarray(plan.weight[:, tap].reshape(shape))
            total = total + weight * xp.take(value, xp.asarray(plan.index[:, tap]), axis=plan.axis)
        if plan.outside is not None:
            total = xp.where(xp.asarray(plan.outside.reshape(shape)),
                             attrs["extrapolation_value"], total)
        value = total
    if out.dtype.kind in "iu":
        info = np.iinfo(out.dtype)
        value = xp.clip(xp.rint(value), info.min, info.max)
    out[...] = value
