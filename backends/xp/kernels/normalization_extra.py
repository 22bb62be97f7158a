"""NumPy kernels: LpNormalization and MeanVarianceNormalization, written against ``ctx.xp``.

Moments are taken in float32 at least (float16 data would lose the variance), as the other
normalisation kernels do.
"""
from __future__ import annotations

import numpy as np

from portable.ops.normalization_extra import MVN_EPSILON, mvn_axes

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _wide(x):
    return x.astype(np.promote_types(x.dtype, np.float32), copy=False)


@kernel("LpNormalization")
def lp_normalization(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = _wide(inputs[0]), outputs[0]
    axis = attrs["axis"] % x.ndim
    if attrs["p"] == 1:
        norm = xp.sum(xp.abs(x), axis=axis, keepdims=True)
    else:
        norm = xp.sqrt(xp.sum(x * x, axis=axis, keepdims=True))
    # A zero norm means a slice of zeros: dividing it by one gives ONNX's 0/0 = 0.
    y[...] = x / xp.where(norm == 0, norm.dtype.type(1), norm)


@kernel("MeanVarianceNormalization")
def mean_variance_normalization(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = _wide(inputs[0]), outputs[0]
    axes = mvn_axes(attrs, x.ndim)
    mean = xp.mean(x, axis=axes, keepdims=True)
    variance = xp.maximum(xp.mean(x * x, axis=axes, keepdims=True) - mean * mean, 0)
    y[...] = (x - mean) / (xp.sqrt(variance) + x.dtype.type(MVN_EPSILON))
