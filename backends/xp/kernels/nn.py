"""NumPy kernels: normalisation, Dropout, Softmax and LogSoftmax (and their private gradients).

BatchNormalization and LayerNormalization both run on a 3-D view (A, C, S) of their input and
reduce over axes 0 and 2, one statistic per C: (N, C, D1*...) for batch norm, (1, rows, D) for
layer norm. Statistics are computed in at least float32 (ONNX asks this of BatchNormalization
and of LayerNormalization's stash_type). Large temporaries cost page faults in NumPy, so the
kernels fold per-C coefficients first and touch full-size arrays as few times as they can, in
place where possible; gradient kernels that may write dX over dY (declared in-place pairs) read
dY for the last time before writing dX.
"""
from __future__ import annotations

import math

import numpy as np

from backends.xp.kernels.im2col import scratch
from portable.backend import kernel_table

kernels, kernel = kernel_table()

_REDUCED = (0, 2)


def _stat_dtype(dtype, stash=np.float32) -> np.dtype:
    return np.promote_types(dtype, stash)


def _view3(array, shape):
    """``array`` reshaped to ``shape`` without a copy (outputs are written through it)."""
    if not array.flags.c_contiguous:
        raise ValueError(f"a non-contiguous buffer of shape {array.shape} cannot be viewed as "
                         f"{shape}")
    return array.reshape(shape)


def _per_c(values):
    """A per-C vector shaped (C, 1) to broadcast against an (A, C, S) view."""
    return values.reshape(-1, 1)


def _dot(xp, a, b):
    """sum over axes 0 and 2 of a * b, without a full-size temporary."""
    return xp.einsum("acs,acs->c", a, b)


class _Moments:
    """Per-C mean, population variance, 1 / sqrt(var + eps) and the centred input of an
    (A, C, S) view, in ``dtype``.

    ``recentre`` takes the centred values' own mean (the rounding error of the first mean)
    off them as well: values far from zero against their spread (rows near 1000 that vary by
    1) otherwise keep that error, divided by the spread, in every output.
    """

    def __init__(self, xp, view, dtype, epsilon: float, recentre: bool = False) -> None:
        self.count = view.shape[0] * view.shape[2]
        view = view.astype(dtype, copy=False)
        self.mean = xp.sum(view, axis=_REDUCED) / self.count
        self.centered = view - _per_c(self.mean)
        if recentre:
            drift = xp.sum(self.centered, axis=_REDUCED) / self.count
            self.centered -= _per_c(drift)
            self.mean += drift
        self.var = _dot(xp, self.centered, self.centered) / self.count
        self.inv_std = 1 / xp.sqrt(self.var + epsilon)


def log_softmax(xp, x, axis):
    """log(softmax(x)) along ``axis``, stable (max subtraction, log-sum-exp)."""
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def softmax(xp, x, axis, out=None):
    out = xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
    xp.exp(out, out=out)
    out /= xp.sum(out, axis=axis, keepdims=True)
    return out


# -- BatchNormalization ----------------------------------------------------------------------


def _batch_view_shape(x, channels: int) -> tuple[int, int, int]:
    # rank 1: C is 1 and the statistics run over the N elements
    return (x.shape[0], channels, x.size // max(x.shape[0] * channels, 1))


@kernel("BatchNormalization")
def batch_normalization(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x, scale, bias, mean, var = inputs
    shape = _batch_view_shape(x, scale.shape[0])
    view, y = x.reshape(shape), _view3(outputs[0], shape)
    stat = _stat_dtype(x.dtype)
    eps = attrs["epsilon"]
    running = zip((outputs + [None, None])[1:3], (mean, var))
    if not attrs["training_mode"]:
        for out, value in running:  # not ONNX outputs in inference: passed through
            if out is not None:
                out[...] = value
        k = scale.astype(stat) / xp.sqrt(var.astype(stat) + eps)
        xp.multiply(view, _per_c(k), out=y, casting="same_kind")
        y += _per_c(bias - mean * k).astype(x.dtype)
        return
    batch = _Moments(xp, view, stat, eps)
    momentum = attrs["momentum"]
    for (out, value), current in zip(running, (batch.mean, batch.var)):
        if out is not None:
            out[...] = value * momentum + current * (1 - momentum)
    xp.multiply(batch.centered, _per_c(scale * batch.inv_std), out=y, casting="same_kind")
    y += _per_c(bias).astype(x.dtype)


@kernel("portable.BatchNormalizationGrad")
def batch_normalization_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    dy, x, scale = inputs[:3]
    d_mean, d_var = (inputs + [None, None])[3:5]
    shape = _batch_view_shape(x, scale.shape[0])
    dy = dy.reshape(shape)
    dx, dscale, dbias = _view3(outputs[0], shape), outputs[1], outputs[2]
    batch = _Moments(xp, x.reshape(shape), _stat_dtype(x.dtype), attrs["epsilon"])
    count, inv_std = batch.count, batch.inv_std
    sum_dy = xp.sum(dy, axis=_REDUCED, dtype=batch.var.dtype)
    dot = _dot(xp, dy, batch.centered)
    dscale[...] = dot * inv_std
    dbias[...] = sum_dy
    # dx = k (dy - mean(dy) - xhat mean(dy xhat)), k = scale inv_std, xhat = centered inv_std,
    # folded into dx = k dy + b centered + c with per-channel b and c
    k = scale * inv_std
    b = -k * inv_std ** 2 * dot / count
    c = -k * sum_dy / count
    # running = ... + batch statistic * (1 - momentum), and the batch statistics depend on x
    carry = 1 - attrs["momentum"]
    if d_mean is not None:
        c = c + carry * d_mean / count
    if d_var is not None:
        b = b + 2 * carry * d_var / count
    rest = batch.centered
    rest *= _per_c(b)
    rest += _per_c(c)
    xp.multiply(dy, _per_c(k), out=dx, casting="same_kind")
    dx += rest.astype(dx.dtype, copy=False)


# -- LayerNormalization ----------------------------------------------------------------------

_STASH_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def _layer_moments(xp, x, attrs):
    """The (1, rows, D) view shape and its per-row moments."""
    axis = attrs["axis"] % x.ndim
    shape = (1, math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    dtype = _stat_dtype(x.dtype, _STASH_TYPES.get(attrs["stash_type"], np.float32))
    return shape, _Moments(xp, x.reshape(shape), dtype, attrs["epsilon"], recentre=True)


def _layer_norm_general(ctx, inputs, outputs, attrs):
    """Any LayerNormalization: statistics in the stash type, scale and bias broadcast."""
    xp = ctx.xp
    x, scale = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    _, rows = _layer_moments(xp, x, attrs)
    normalized = rows.centered
    normalized *= _per_c(rows.inv_std)
    y = outputs[0]
    xp.multiply(normalized.reshape(x.shape).astype(x.dtype, copy=False), scale, out=y)
    if bias is not None:
        y += bias
    for out, stat in zip(outputs[1:], (rows.mean, rows.inv_std)):
        if out is not None:
            out[...] = stat.reshape(out.shape)


class _LayerRows:
    """A LayerNormalization step whose statistics are in the input's own type (float32 with the
    default stash type, float64) and whose scale and bias hold one value per normalised
    element: it runs on (rows, D) views in ten namespace calls and no full-size temporary.

    The centred input is written straight into Y, so Y is written over X's values only after
    the mean has been read (an in-place step is safe). Both reductions are dot products, not
    NumPy's reduction loops (slow on short rows): the mean a matrix-vector product with a
    prepared vector of 1/D, the sum of squares each centred row's dot with itself; then
    1 / sqrt(var + eps) = sqrt(D) / sqrt(sum of squares + D * eps).
    """

    def __init__(self, xp, shape: tuple, axis: int, dtype, epsilon: float) -> None:
        self.rows = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        size = self.rows[1]
        self.mean_weights = xp.asarray(np.full(size, 1.0 / size, dtype=dtype))
        self.eps_sum = dtype.type(size * epsilon)
        self.sqrt_size = dtype.type(math.sqrt(size))
        # (NumPy's vecdot is a BLAS dot per row; CuPy has no vecdot)
        vecdot = getattr(np, "vecdot", None) if xp is np else None
        self.square_sums = ((lambda a: vecdot(a, a)) if vecdot is not None else
                            (lambda a: xp.einsum("ij,ij->i", a, a)))

    def __call__(self, xp, x, scale, bias, y, mean_out, inv_std_out) -> None:
        rows = self.rows
        x, y = x.reshape(rows), y.reshape(rows)
        mean = xp.matmul(x, self.mean_weights)
        xp.subtract(x, mean[:, None], out=y)
        drift = xp.matmul(y, self.mean_weights)  # (the first mean's rounding: _Moments)
        y -= drift[:, None]
        mean += drift
        inv_std = self.square_sums(y)
        inv_std += self.eps_sum
        xp.sqrt(inv_std, out=inv_std)
        xp.divide(self.sqrt_size, inv_std, out=inv_std)
        y *= inv_std[:, None]
        y *= scale.reshape(rows[1])
        if bias is not None:
            y += bias.reshape(rows[1])
        for out, stat in ((mean_out, mean), (inv_std_out, inv_std)):
            if out is not None:
                out[...] = stat.reshape(out.shape)


def _prepare_layer_norm(backend, input_types, output_types, attrs) -> _LayerRows | None:
    """The row plan where it applies (static shapes, statistics in the input's type, a scale
    and bias of one value per normalised element, something to normalise), else None."""
    x = input_types[0]
    if x is None or not x.shape or any(d is None for d in x.shape):
        return None
    axis = attrs["axis"] % len(x.shape)
    size = math.prod(x.shape[axis:])
    dtype = np.dtype(x.dtype)
    if not size or _stat_dtype(dtype, _STASH_TYPES.get(attrs["stash_type"], np.float32)) != dtype:
        return None
    for type_ in input_types[1:3]:
        if type_ is not None and (any(d is None for d in type_.shape)
                                  or math.prod(type_.shape) != size):
            return None
    return _LayerRows(backend.xp, x.shape, axis, dtype, attrs["epsilon"])


@kernel("LayerNormalization", prepare=_prepare_layer_norm)
def layer_normalization(rows, ctx, inputs, outputs, attrs):
    if rows is None or not outputs[0].flags.c_contiguous:
        _layer_norm_general(ctx, inputs, outputs, attrs)
        return
    extra = outputs[1:] + [None, None]
    rows(ctx.xp, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, outputs[0],
         extra[0], extra[1])


@kernel("RMSNormalization")
def rms_normalization(ctx, inputs, outputs, attrs):
    xp, (x, scale), y = ctx.xp, inputs, outputs[0]
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    wide = x.astype(_stat_dtype(x.dtype, _STASH_TYPES.get(attrs["stash_type"], np.float32)))
    mean_square = xp.mean(wide * wide, axis=axes, keepdims=True)
    normalized = wide / xp.sqrt(mean_square + wide.dtype.type(attrs["epsilon"]))
    xp.multiply(normalized.astype(x.dtype, copy=False), scale, out=y)


def _grouped_normalization(xp, x, scale, bias, groups, epsilon, stash=np.float32):
    """(N, C, D...) normalised over each group of C / groups channels and the spatial axes,
    then scaled and shifted per channel."""
    wide = x.astype(_stat_dtype(x.dtype, stash)).reshape(x.shape[0], groups, -1)
    centred = wide - xp.mean(wide, axis=2, keepdims=True)
    variance = xp.mean(centred * centred, axis=2, keepdims=True)
    normalized = (centred / xp.sqrt(variance + wide.dtype.type(epsilon))).reshape(x.shape)
    channels = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return normalized * scale.reshape(channels) + bias.reshape(channels)


@kernel("InstanceNormalization")
def instance_normalization(ctx, inputs, outputs, attrs):
    x, scale, bias = inputs
    outputs[0][...] = _grouped_normalization(ctx.xp, x, scale, bias, x.shape[1],
                                             attrs["epsilon"])


@kernel("GroupNormalization")
def group_normalization(ctx, inputs, outputs, attrs):
    x, scale, bias = inputs
    outputs[0][...] = _grouped_normalization(
        ctx.xp, x, scale, bias, attrs["num_groups"], attrs["epsilon"],
        _STASH_TYPES.get(attrs["stash_type"], np.float32))


@kernel("portable.LayerNormalizationGrad")
def layer_normalization_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    dy, x, scale = inputs[:3]
    d_mean, d_inv_std = (inputs + [None, None])[3:5]
    dx, dscale = outputs
    shape, rows = _layer_moments(xp, x, attrs)
    inv_std, count = rows.inv_std, rows.count
    g = (dy * scale).reshape(shape)  # dL/dxhat
    sum_g = xp.sum(g, axis=_REDUCED)
    dot = _dot(xp, g, rows.centered)
    xhat = rows.centered
    xhat *= _per_c(inv_std)
    dscale[...] = xp.einsum("acs,acs->s", dy.reshape(shape), xhat).reshape(dscale.shape)
    # dx = inv_std (g - mean(g) - xhat mean(g xhat)) = inv_std g + b xhat + c per row
    b = -inv_std * inv_std * dot / count
    c = -inv_std * sum_g / count
    if d_mean is not None:
        c = c + d_mean.reshape(-1) / count
    if d_inv_std is not None:  # d inv_std / dx = -inv_std^2 xhat / count
        b = b - d_inv_std.reshape(-1) * inv_std * inv_std / count
    g *= _per_c(inv_std)
    xhat *= _per_c(b)
    g += xhat
    g += _per_c(c)
    dx[...] = g.reshape(dx.shape)


# -- LRN ---------------------------------------------------------------------------------------


def _channel_window_sum(xp, a, size, transpose=False, out=None):
    """Sum of ``a`` over the channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]
    (clipped to [0, C)); ``transpose`` sums over the channels whose window holds c. Written
    into ``out`` when given (a buffer other than ``a``)."""
    before = (size - 1) // 2
    after = size - 1 - before
    if transpose:
        before, after = after, before
    channels = a.shape[1]
    if out is None:
        out = a.copy()  # offset 0
    else:
        out[...] = a
    # `size` is small (3 to 5 in practice): one vectorised shifted add per window offset
    for off in range(-min(before, channels - 1), min(after, channels - 1) + 1):
        if off:
            out[:, max(0, -off):channels - max(0, off)] += \
                a[:, max(0, off):channels - max(0, -off)]
    return out


def _power_inplace(xp, a, exponent: float, work=None):
    """a **= exponent for a > 0 (LRN's denominator), in place. NumPy's float pow is slow: the
    default -3/4 takes square roots, other fractions exp(exponent * log a) (about 2x faster).
    ``work``, a buffer like ``a``, avoids one temporary."""
    if float(exponent).is_integer():  # also right for a <= 0
        a **= exponent
        return a
    if exponent == -0.75:  # ONNX's default beta: a^-3/4 = 1 / (sqrt(a) sqrt(sqrt(a)))
        root = xp.sqrt(a) if work is None else xp.sqrt(a, out=work)
        xp.sqrt(root, out=a)
        a *= root
        return xp.reciprocal(a, out=a)
    xp.log(a, out=a)
    a *= exponent
    return xp.exp(a, out=a)


def _lrn_denominator(xp, x, attrs):
    """bias + alpha / size * (sum of squares over the channel window), a fresh array."""
    size = attrs["size"]
    denominator = _channel_window_sum(xp, xp.square(x), size)
    denominator *= attrs["alpha"] / size
    denominator += attrs["bias"]
    return denominator


@kernel("LRN")
def lrn(ctx, inputs, outputs, attrs):
    # Both temporaries come from the planned workspace (declared below), so the memory plan
    # counts them and nothing is allocated per call.
    xp, x = ctx.xp, inputs[0]
    square = scratch(ctx, "lrn_square", x.shape, x.dtype)
    xp.multiply(x, x, out=square)
    denominator = _channel_window_sum(xp, square, attrs["size"],
                                      out=scratch(ctx, "lrn_sum", x.shape, x.dtype))
    denominator *= attrs["alpha"] / attrs["size"]
    denominator += attrs["bias"]
    factor = _power_inplace(xp, denominator, -attrs["beta"], work=square)
    xp.multiply(x, factor, out=outputs[0])


def _lrn_workspace(input_types, output_types, attrs) -> dict[str, int]:
    nbytes = input_types[0].nbytes
    return {"lrn_square": nbytes, "lrn_sum": nbytes}


lrn.workspace = _lrn_workspace


@kernel("portable.LRNGrad")
def lrn_grad(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    dy, x = inputs
    beta, size = attrs["beta"], attrs["size"]
    denominator = _lrn_denominator(xp, x, attrs)
    factor = _power_inplace(xp, denominator.copy(), -beta)
    # y_j = x_j d_j^-beta and d_j depends on x_i^2 for every i in j's window
    through_d = dy * x
    through_d *= factor
    through_d /= denominator
    spread = _channel_window_sum(xp, through_d, size, transpose=True)
    spread *= x
    spread *= -2 * attrs["alpha"] * beta / size
    factor *= dy
    factor += spread
    outputs[0][...] = factor


# -- Dropout -----------------------------------------------------------------------------------


def _drop_ratio(ratio, flag, attrs) -> float:
    """The fraction of elements dropped: 0 in inference mode (the op is then a copy)."""
    # .item(): scalars may arrive as 1-element arrays (and on a device)
    training = bool(attrs["training_mode"]) or (flag is not None and bool(flag.item()))
    if not training:
        return 0.0
    ratio = 0.5 if ratio is None else float(ratio.item())
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"Dropout ratio {ratio} is not in [0, 1)")
    return ratio


@kernel("Dropout")
def dropout(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    x = inputs[0]
    y, mask = (outputs + [None])[:2]
    ratio = _drop_ratio(*(inputs + [None, None])[1:3], attrs)
    if ratio == 0.0:
        y[...] = x
        if mask is not None:
            mask[...] = True
        return
    # Host generator (seeded by portable.random) so every backend draws the same mask.
    keep = xp.asarray(ctx.rng.random(x.shape, dtype=np.float32) >= ratio)
    xp.multiply(x, keep, out=y)
    y *= y.dtype.type(1.0 / (1.0 - ratio))
    if mask is not None:
        mask[...] = keep


@kernel("portable.DropoutGrad")
def dropout_grad(ctx, inputs, outputs, attrs):
    dy, mask = inputs[:2]
    ratio = _drop_ratio(*(inputs + [None, None])[2:4], attrs)
    dx = outputs[0]
    if ratio == 0.0:
        dx[...] = dy
        return
    ctx.xp.multiply(dy, mask, out=dx)
    dx *= dx.dtype.type(1.0 / (1.0 - ratio))


# -- Softmax and LogSoftmax --------------------------------------------------------------------


# Rows this short (and this many of them) are normalised through a transposed copy: NumPy
# reduces each short row with a loop of its own (64 rows of 16 take 5 us for their maxima), but
# reduces a (length, rows) array down its first axis in one vectorised sweep over contiguous
# rows; the copy costs less than the difference. Longer rows reduce well where they are.
_SHORT_ROW = 32
_MANY_ROWS = 16
# A transposed copy up to this size is allocated per call (the allocator keeps small blocks:
# no page faults, and a quarter of the cost of carving it from the workspace); a larger one
# comes from the planned workspace.
_SMALL_COPY = 1 << 16


class _SoftmaxRows:
    """A Softmax step over the last axis, seen as (rows, length); short rows go through a
    transposed copy (``transposed``), taken from the workspace ``softmax_columns`` when it is
    large (``workspace``)."""

    def __init__(self, rows: int, length: int, itemsize: int) -> None:
        self.shape = (rows, length)
        self.transposed = length <= _SHORT_ROW and rows >= _MANY_ROWS
        self.workspace = self.transposed and rows * length * itemsize > _SMALL_COPY

    def __call__(self, ctx, x, y) -> None:
        xp = ctx.xp
        x, y = x.reshape(self.shape), y.reshape(self.shape)
        if not self.transposed:
            softmax(xp, x, 1, out=y)
            return
        columns = (scratch(ctx, "softmax_columns", self.shape[::-1], x.dtype) if self.workspace
                   else xp.empty(self.shape[::-1], dtype=x.dtype))
        xp.copyto(columns, x.T)
        columns -= xp.maximum.reduce(columns, axis=0)
        xp.exp(columns, out=columns)
        xp.divide(columns.T, xp.add.reduce(columns, axis=0)[:, None], out=y)


def _prepare_softmax(backend, input_types, output_types, attrs) -> _SoftmaxRows | None:
    """The row plan for a softmax over the last axis of a static shape, else None."""
    shape = input_types[0].shape
    if not shape or any(d is None for d in shape) or attrs["axis"] % len(shape) != len(shape) - 1:
        return None
    itemsize = np.dtype(input_types[0].dtype).itemsize
    return _SoftmaxRows(math.prod(shape[:-1]), shape[-1], itemsize)


def _softmax_workspace(input_types, output_types, attrs) -> dict[str, int]:
    plan = _prepare_softmax(None, input_types, output_types, attrs)
    return {"softmax_columns": input_types[0].nbytes} if plan and plan.workspace else {}


@kernel("Softmax", prepare=_prepare_softmax)
def softmax_kernel(rows, ctx, inputs, outputs, attrs):
    x, y = inputs[0], outputs[0]
    if not x.size:
        return
    if rows is None or not y.flags.c_contiguous:
        softmax(ctx.xp, x, attrs["axis"], out=y)
    else:
        rows(ctx, x, y)


softmax_kernel.workspace = _softmax_workspace


@kernel("LogSoftmax")
def log_softmax_kernel(ctx, inputs, outputs, attrs):
    if inputs[0].size:
        outputs[0][...] = log_softmax(ctx.xp, inputs[0], attrs["axis"])
