"""Compiled LayerNormalization and last-axis Softmax: one call over the rows, where NumPy takes
a call per pass.

A transformer at batch 1 normalises a few short rows at a time (16 positions of 64 features
in the small encoder). The xp kernels, even with their row plans made once
(``backends/xp/kernels/nn.py``), are six to eight NumPy calls of a microsecond each: 7.9 us
for a (16, 64) LayerNormalization and 7.0 us for a (4, 16, 16) Softmax, where each row's work
is a few dozen nanoseconds. Here each is one loop over the rows (0.8 and 2.9 us, measured on
an AVX-512 machine at one thread; the Softmax's time is mostly ``exp``).

LayerNormalization: per row, the mean, the centred values, their mean and mean square (the
centred values' mean is the first mean's rounding error, taken off them), then
``(x - mean) * inv_std * scale + bias`` with ``inv_std = 1 / sqrt(var + epsilon)``, in the
input's dtype, which is what the xp kernel's row plan takes (statistics in float32 for a
float32 input, ``stash_type`` 1, or float64); the optional Mean and InvStdDev outputs are
written too. Softmax: ``exp(x - max) / sum`` per row of the last axis. The sums are
reassociated (vectorised), so results agree with the xp kernels to rounding; NaN and inf
propagate as there (no fast-math assumption beyond reassociation and contraction). Other
configurations (another axis for Softmax, a scale of another shape, half types, strided
views) run the xp kernels.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from backends.numpy.jit.support import JIT, contiguous, override
from backends.xp.kernels.nn import layer_normalization as xp_layer_norm
from backends.xp.kernels.nn import softmax_kernel as xp_softmax

_ROW_JIT = dict(JIT, fastmath={"reassoc", "contract"})
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_STASH = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@numba.njit(**_ROW_JIT)
def layer_norm_rows(x, scale, bias, y, mean_out, inv_out, epsilon, stats):
    """y (rows, size) = LayerNormalization of each row of x; ``mean_out`` and ``inv_out``
    (rows,) get the statistics when ``stats``."""
    rows, size = x.shape
    count = x.dtype.type(size)
    one = x.dtype.type(1)
    for r in range(rows):
        row, out = x[r], y[r]
        total = x.dtype.type(0)
        for j in range(size):
            total += row[j]
        mean = total / count
        drift = x.dtype.type(0)
        squares = x.dtype.type(0)
        for j in range(size):
            centred = row[j] - mean
            out[j] = centred
            drift += centred
            squares += centred * centred
        # the centred values' own mean is the first mean's rounding error (see the xp
        # kernel's _Moments): taken off them, and off their mean square
        drift /= count
        inv_std = one / np.sqrt(squares / count - drift * drift + epsilon)
        for j in range(size):
            out[j] = (out[j] - drift) * inv_std * scale[j] + bias[j]
        if stats:
            mean_out[r] = mean + drift
            inv_out[r] = inv_std


@numba.njit(**_ROW_JIT)
def softmax_rows(x, y):
    """y (rows, n) = exp(x - max) / sum along each row of x."""
    rows, n = x.shape
    for r in range(rows):
        row, out = x[r], y[r]
        top = row[0]
        for j in range(1, n):
            top = max(top, row[j])
        total = x.dtype.type(0)
        for j in range(n):
            value = np.exp(row[j] - top)
            out[j] = value
            total += value
        for j in range(n):
            out[j] = out[j] / total


def _prepare_layer_norm(input_types, output_types, attrs):
    """(rows, size, epsilon, zeros for an absent bias), or None (the xp kernel's case)."""
    x = input_types[0]
    if x is None or not x.is_static or not x.shape or x.dtype not in FLOATS:
        return None
    if _STASH.get(attrs["stash_type"]) != x.dtype and x.dtype != np.float64:
        return None  # (statistics in another type: the xp kernel widens)
    axis = attrs["axis"] % len(x.shape)
    rows, size = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if not size or not rows:
        return None
    for type_ in input_types[1:3]:
        if type_ is not None and (not type_.is_static or type_.dtype != x.dtype
                                  or math.prod(type_.shape) != size):
            return None
    if input_types[1] is None or any(t is not None and t.dtype != x.dtype
                                     for t in output_types):
        return None
    return rows, size, x.dtype.type(attrs["epsilon"]), np.zeros(size, x.dtype), [None]


@override(xp_layer_norm, _prepare_layer_norm)
def layer_normalization(state, ctx, inputs, outputs, attrs) -> bool:
    rows, size, epsilon, zeros, kept = state
    x, scale, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    mean, inv = (list(outputs[1:3]) + [None, None])[:2]
    if mean is None and inv is None:
        # A plan hands the same arrays every run: their row views are made once (the
        # reshapes and checks were most of a call on a few short rows). ``kept`` holds one
        # tuple, replaced whole and read once, so two threads calling the same prepared
        # kernel (imperative calls share it) never mix each other's views; and only views
        # into a plan's buffers are kept (an imperative call's fresh output owns its memory,
        # which the kernel must not hold past the call).
        views = kept[0]
        if views is None or not (views[0] is x and views[1] is scale and views[2] is bias
                                 and views[3] is y):
            if not contiguous(x, scale, bias, y):
                return False
            views = (x, scale, bias, y, x.reshape(rows, size), scale.reshape(-1),
                     bias.reshape(-1), y.reshape(rows, size))
            if y.base is not None:
                kept[0] = views
        layer_norm_rows(views[4], views[5], views[6], views[7], zeros, zeros, epsilon, False)
        return True
    if not contiguous(x, scale, bias, y, mean, inv):
        return False
    # (an absent statistic is written to a throwaway row)
    mean = np.empty(rows, x.dtype) if mean is None else mean
    inv = np.empty(rows, x.dtype) if inv is None else inv
    layer_norm_rows(x.reshape(rows, size), scale.reshape(-1), bias.reshape(-1),
                    y.reshape(rows, size), mean.reshape(-1), inv.reshape(-1), epsilon, True)
    return True


def _prepare_softmax(input_types, output_types, attrs):
    """(rows, n) for a softmax over the last axis of a static float shape, or None."""
    x, y = input_types[0], output_types[0]
    if (x is None or not x.is_static or not x.shape or x.dtype not in FLOATS
            or y.dtype != x.dtype or attrs["axis"] % len(x.shape) != len(x.shape) - 1):
        return None
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    return ((rows, n), [None]) if rows and n else None


@override(xp_softmax, _prepare_softmax)
def softmax(state, ctx, inputs, outputs, attrs) -> bool:
    shape, kept = state
    x, y = inputs[0], outputs[0]
    views = kept[0]  # (one tuple, kept as LayerNormalization keeps it)
    if views is None or views[0] is not x or views[1] is not y:
        if not contiguous(x, y):
            return False
        views = (x, y, x.reshape(shape), y.reshape(shape))
        if y.base is not None:
            kept[0] = views
    softmax_rows(views[2], views[3])
    return True


kernels = {"LayerNormalization": layer_normalization, "Softmax": softmax}
