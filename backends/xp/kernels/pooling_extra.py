"""NumPy kernels: LpPool, GlobalLpPool and MaxUnpool, written against ``ctx.xp``.

LpPool is the window sum of ``|x|^p`` through the shared kernel-offset walk of the pools
(``im2col.reduce_windows``: one strided add per kernel offset, padding never visited, which
is what counting it as zero means), then the p-th root.
"""
from __future__ import annotations

import math

from portable.errors import BackendError
from portable.ops.conv import pool_geometry
from portable.ops.pooling_extra import unpool_shape

from backends.xp.kernels.im2col import reduce_windows
from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _powered(xp, x, p: int):
    """``|x|^p`` (a new array; p = 1 and 2 without a power call)."""
    if p == 1:
        return xp.abs(x)
    if p == 2:
        return x * x
    return xp.abs(x) ** p


def _root(xp, y, p: int) -> None:
    if p == 2:
        xp.sqrt(y, out=y)
    elif p != 1:
        xp.power(y, y.dtype.type(1.0 / p), out=y)


@kernel("LpPool")
def lp_pool(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = inputs[0], outputs[0]
    p = attrs["p"]
    reduce_windows(xp, _powered(xp, x, p), pool_geometry(x.shape[2:], attrs), y, xp.add, 0)
    _root(xp, y, p)


@kernel("GlobalLpPool")
def global_lp_pool(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, y = inputs[0], outputs[0]
    p = attrs["p"]
    xp.sum(_powered(xp, x, p), axis=tuple(range(2, x.ndim)), keepdims=True, out=y)
    _root(xp, y, p)


@kernel("MaxUnpool")
def max_unpool(ctx, inputs, outputs, attrs):
    """Scatter X to the flat positions I of the unpooled block (the last of repeated indices
    wins, as onnx.reference writes in order; MaxPool's repeats carry equal values anyway)."""
    xp = ctx.xp
    x, index, y = inputs[0], inputs[1], outputs[0]
    shape = unpool_shape(x.shape, attrs)
    size = math.prod(shape)
    flat = index.reshape(-1)
    if flat.size and bool(xp.any((flat < 0) | (flat >= size))):
        raise BackendError(f"MaxUnpool: indices must lie in [0, {size}) for the unpooled shape "
                           f"{shape}; got values from {int(flat.min())} to {int(flat.max())}")
    y[...] = 0
    block = y[tuple(slice(0, n) for n in shape)]
    target = block if block.flags.c_contiguous else xp.zeros(shape, dtype=y.dtype)
    target.reshape(-1)[flat] = x.reshape(-1)
    if target is not block:
        block[...] = target
