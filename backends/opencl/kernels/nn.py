"""OpenCL kernels: Softmax/LogSoftmax, BatchNormalization, LayerNormalization, LRN, Dropout
and their private gradients.

Softmax runs one work-item per row (max, sum of exponentials, write: three passes over the
row, any axis through strides). Normalisation views its input as (A, C, S) and reduces over
axes 0 and 2 (batch norm: (N, C, D1*...); layer norm: (1, rows, D) transposed to (rows, D)),
with statistics in at least float32, then applies one fused elementwise expression; the
per-channel algebra of the gradients runs on (C,)-sized vectors on the device. LRN and its
gradient are hand-written window kernels. Dropout draws its mask with the seeded host
generator (as the NumPy reference does) so results are identical on every device.
"""
from __future__ import annotations

import math

import numpy as np

from backends.opencl.allocator import empty, from_numpy, host_value
from backends.opencl.codegen import EwOp
from backends.opencl.elementwise import apply, assign, run_expression
from backends.opencl.kernels.table import kernel_table
from backends.opencl.reduction import reduce
from backends.opencl.scalars import ctype, preamble

kernels, kernel = kernel_table()

# -- Softmax and LogSoftmax --------------------------------------------------------------------

# R() rounds to the storage type where it is narrower than the compute type (float16): NumPy,
# the reference, rounds every step of a float16 softmax (the shift, each exponential, the sum,
# the log) to float16, accumulating the sum in float32.
_SOFTMAX = """
inline float portable_round_half(float v) {{
  ushort h;
  vstore_half_rte(v, 0, (__private half*)&h);
  return vload_half(0, (__private const half*)&h);
}}
__kernel void softmax(const int rows, const int length, const int inner,
                      __global const {S}* x, const int x_off, __global {S}* y, const int y_off,
                      const int log_out) {{
  const int row = get_global_id(0);
  if (row >= rows) return;
  const int base = (row / inner) * length * inner + row % inner;
  {T} top = -INFINITY;
  for (int k = 0; k < length; ++k) top = fmax(top, {LOAD_X});
  {T} total = 0;
  for (int k = 0; k < length; ++k) total += {R}(exp({R}({LOAD_X} - top)));
  total = {R}(total);
  const {T} log_total = {R}(log(total));
  for (int k = 0; k < length; ++k) {{
    const {T} shifted = {R}({LOAD_X} - top);
    const {T} v = log_out ? shifted - log_total : {R}(exp(shifted)) / total;
    {STORE_Y};
  }}
}}
"""


def softmax_into(x, axis: int, y, log: bool = False) -> None:
    """``y`` = (log-)softmax of ``x`` along ``axis``; both contiguous (copied otherwise)."""
    if x.size == 0:
        return
    runtime = x.runtime
    source = x.contiguous()
    target = y if y.is_contiguous else empty(runtime, y.shape, y.dtype)
    axis %= x.ndim
    length = x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    c = ctype(x.dtype)
    code = preamble([x.dtype]) + _SOFTMAX.format(
        S=c.storage, T=c.compute, LOAD_X=c.load("x", "x_off + base + k * inner"),
        R="portable_round_half" if c.storage == "half" else "",
        STORE_Y=c.store("y", "y_off + base + k * inner", "v"))
    kern = runtime.kernel(code, "softmax")
    rows = x.size // max(length, 1)
    runtime.launch1d(kern, rows, np.int32(rows), np.int32(length), np.int32(inner),
                     source.buffer, np.int32(source.offset), target.buffer,
                     np.int32(target.offset), np.int32(log))
    if target is not y:
        assign(y, target)


@kernel("Softmax", half="native")
def softmax(ctx, inputs, outputs, attrs):
    softmax_into(inputs[0], attrs["axis"], outputs[0])


@kernel("LogSoftmax", half="native")
def log_softmax(ctx, inputs, outputs, attrs):
    softmax_into(inputs[0], attrs["axis"], outputs[0], log=True)


# -- shared moments ----------------------------------------------------------------------------


def _stat_dtype(dtype) -> np.dtype:
    return np.promote_types(dtype, np.float32)


class _Moments:
    """Per-C mean, centred input, population variance and 1/sqrt(var + eps) of an (A, C, S)
    view, reducing over axes 0 and 2."""

    def __init__(self, view, dtype, epsilon: float) -> None:
        x = view if view.dtype == dtype else view.astype(dtype)
        self.count = view.shape[0] * view.shape[2]
        self.mean = reduce(x, (0, 2), "mean")
        self.centered = apply("Sub", x, self.mean.reshape(-1, 1))
        self.var = reduce(self.centered, (0, 2), "meansq")
        self.inv_std = apply("InvStd", self.var, params=[epsilon])


def _per_c(v):
    return v.reshape(-1, 1)


def _view3(array, channels: int):
    n = array.shape[0]
    return array.reshape(n, channels, array.size // max(n * channels, 1))


# -- BatchNormalization ------------------------------------------------------------------------


@kernel("BatchNormalization")
def batch_normalization(ctx, inputs, outputs, attrs):
    x, scale, bias, mean, var = inputs
    channels = scale.shape[0]
    view, y = _view3(x, channels), _view3(outputs[0], channels)
    eps = attrs["epsilon"]
    running = list(zip((outputs + [None, None])[1:3], (mean, var)))
    stat = _stat_dtype(x.dtype)
    if not attrs["training_mode"]:
        for out, value in running:  # not ONNX outputs in inference: passed through
            if out is not None:
                assign(out, value)
        scale, bias, mean, var = (a.astype(stat) if a.dtype != stat else a
                                  for a in (scale, bias, mean, var))
        # per channel: k = scale / sqrt(var + eps), b = bias - mean k; then y = x k + b
        k = apply("Mul", scale, apply("InvStd", var, params=[eps]))
        b = apply("Sub", bias, apply("Mul", mean, k))
        apply("MulAdd", view, _per_c(k), _per_c(b), out=y)
        return
    batch = _Moments(view, stat, eps)
    for (out, value), current in zip(running, (batch.mean, batch.var)):
        if out is not None:
            apply("Lerp", value, current, out=out, params=[attrs["momentum"]])
    k = apply("Mul", scale, batch.inv_std)
    apply("MulAdd", batch.centered, _per_c(k), _per_c(bias), out=y)


_BN_GRAD = EwOp("BatchNormGrad", "{0} * {1} + {2} * {3} + {4}", 5)  # k dy + b xc + c


@kernel("portable.BatchNormalizationGrad")
def batch_normalization_grad(ctx, inputs, outputs, attrs):
    dy, x, scale = inputs[:3]
    d_mean, d_var = (list(inputs) + [None, None])[3:5]
    channels = scale.shape[0]
    dy3 = _view3(dy, channels)
    dx, dscale, dbias = _view3(outputs[0], channels), outputs[1], outputs[2]
    stat = _stat_dtype(x.dtype)
    batch = _Moments(_view3(x, channels), stat, attrs["epsilon"])
    count, inv_std = batch.count, batch.inv_std
    sum_dy = reduce(dy3, (0, 2), "sum", dtype=stat)
    dot = reduce(apply("Mul", dy3, batch.centered), (0, 2), "sum")
    apply("Mul", dot, inv_std, out=dscale)
    assign(dbias, sum_dy)
    # dx = k dy + b centered + c, with k = scale inv_std, b = -k inv_std^2 dot / count and
    # c = -k sum(dy) / count (plus the running statistics' share, which depends on x too)
    k = apply("Mul", scale, inv_std)
    b = apply("Mul", apply("Mul", apply("Mul", k, inv_std), inv_std), dot)
    b = apply("Mul", b, -1.0 / count)
    c = apply("Mul", apply("Mul", k, sum_dy), -1.0 / count)
    carry = 1 - attrs["momentum"]
    if d_mean is not None:
        c = apply("Add", c, apply("Mul", d_mean, carry / count))
    if d_var is not None:
        b = apply("Add", b, apply("Mul", d_var, 2 * carry / count))
    run_expression(_BN_GRAD, [dy3, _per_c(k), batch.centered, _per_c(b), _per_c(c)], dx)


# -- LayerNormalization ------------------------------------------------------------------------

_STASH_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}


class _RowMoments:
    """Per-row moments of the (rows, width) view LayerNormalization normalises."""

    def __init__(self, x, attrs) -> None:
        axis = attrs["axis"] % x.ndim
        rows, width = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
        dtype = np.promote_types(x.dtype, _STASH_TYPES.get(attrs["stash_type"], np.float32))
        view = x.reshape(rows, width)
        view = view if view.dtype == dtype else view.astype(dtype)
        self.rows, self.count = rows, width
        mean = reduce(view, (1,), "mean", keepdims=True)
        centered = apply("Sub", view, mean)
        # the centred values' own mean is the first mean's rounding error (rows far from
        # zero against their spread), taken off them as the CPU kernels do
        drift = reduce(centered, (1,), "mean", keepdims=True)
        self.mean = apply("Add", mean, drift)
        self.centered = apply("Sub", centered, drift)
        self.var = reduce(self.centered, (1,), "meansq", keepdims=True)
        self.inv_std = apply("InvStd", self.var, params=[attrs["epsilon"]])


def _grouped_normalization(x, scale, bias, groups, epsilon, out):
    """(N, C, D...) normalised over each group of channels and the spatial axes, then scaled
    and shifted per channel (float16 arrives upcast by the kernel table)."""
    x, scale, bias = (v.contiguous() for v in (x, scale, bias))
    grouped = x.reshape(x.shape[0], groups, x.size // (x.shape[0] * groups))
    centred = apply("Sub", grouped, reduce(grouped, (2,), "mean", True))
    inv_std = apply("InvStd", reduce(centred, (2,), "meansq", True), params=[epsilon])
    channels = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    normalized = apply("Mul", centred, inv_std).reshape(x.shape)
    apply("Add", apply("Mul", normalized, scale.reshape(channels)), bias.reshape(channels),
          out=out)


@kernel("InstanceNormalization")
def instance_normalization(ctx, inputs, outputs, attrs):
    x, scale, bias = inputs
    _grouped_normalization(x, scale, bias, x.shape[1], attrs["epsilon"], outputs[0])


@kernel("GroupNormalization")
def group_normalization(ctx, inputs, outputs, attrs):
    x, scale, bias = inputs
    _grouped_normalization(x, scale, bias, attrs["num_groups"], attrs["epsilon"], outputs[0])


@kernel("RMSNormalization")
def rms_normalization(ctx, inputs, outputs, attrs):
    # (float16 runs upcast to float32, the default stash type, by the kernel table)
    x, scale = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    inv_rms = apply("InvStd", reduce(x, axes, "meansq", True), params=[attrs["epsilon"]])
    apply("Mul", apply("Mul", x, inv_rms), scale, out=outputs[0])


@kernel("LayerNormalization")
def layer_normalization(ctx, inputs, outputs, attrs):
    x, scale = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    rows = _RowMoments(x, attrs)
    normalized = apply("Mul", rows.centered, rows.inv_std).reshape(x.shape)
    if normalized.dtype != x.dtype:
        normalized = normalized.astype(x.dtype)
    if bias is None:
        apply("Mul", normalized, scale, out=outputs[0])
    else:
        apply("MulAdd", normalized, scale, bias, out=outputs[0])
    for out, stat in zip(outputs[1:], (rows.mean, rows.inv_std)):
        if out is not None:
            assign(out, stat.reshape(out.shape))


@kernel("portable.LayerNormalizationGrad")
def layer_normalization_grad(ctx, inputs, outputs, attrs):
    dy, x, scale = inputs[:3]
    d_mean, d_inv_std = (list(inputs) + [None, None])[3:5]
    dx, dscale = outputs
    rows = _RowMoments(x, attrs)
    shape = (rows.rows, rows.count)
    g = apply("Mul", dy, scale).reshape(shape)  # dL/dxhat
    sum_g = reduce(g, (1,), "sum", keepdims=True)
    dot = reduce(apply("Mul", g, rows.centered), (1,), "sum", keepdims=True)
    xhat = apply("Mul", rows.centered, rows.inv_std)
    reduce(apply("Mul", dy.reshape(shape), xhat), (0,), "sum",
           out=dscale.reshape(-1) if dscale.is_contiguous else None)
    if not dscale.is_contiguous:
        assign(dscale, reduce(apply("Mul", dy.reshape(shape), xhat), (0,), "sum")
               .reshape(dscale.shape))
    # dx = inv_std g + b xhat + c per row, b = -inv_std^2 dot / count, c = -inv_std sum_g / count
    inv2 = apply("Mul", rows.inv_std, rows.inv_std)
    b = apply("Mul", apply("Mul", inv2, dot), -1.0 / rows.count)
    c = apply("Mul", apply("Mul", rows.inv_std, sum_g), -1.0 / rows.count)
    if d_mean is not None:
        c = apply("Add", c, apply("Mul", d_mean.reshape(-1, 1), 1.0 / rows.count))
    if d_inv_std is not None:  # d inv_std / dx = -inv_std^2 xhat / count
        b = apply("Sub", b, apply("Mul", apply("Mul", d_inv_std.reshape(-1, 1), inv2),
                                  1.0 / rows.count))
    run_expression(_BN_GRAD, [g, rows.inv_std, xhat, b, c], dx.reshape(shape))


# -- LRN ---------------------------------------------------------------------------------------

_LRN = """
inline {T} window_sum(__global const {S}* x, const int at, const int c, const int channels,
                      const int inner, const int lo, const int hi) {{
  {T} total = 0;
  for (int j = max(c - lo, 0); j <= min(c + hi, channels - 1); ++j) {{
    const {T} v = {LOAD_J};
    total += v * v;
  }}
  return total;
}}

__kernel void lrn(const int n, const int channels, const int inner, const int before,
                  const int after, const {T} scale, const {T} bias, const {T} beta,
                  __global const {S}* x, const int x_off, __global const {S}* dy,
                  const int dy_off, __global {S}* out, const int o_off, const int mode) {{
  const int i = get_global_id(0);
  if (i >= n) return;
  const int c = (i / inner) % channels;
  const int at = x_off + i - c * inner;  /* element (n, 0, s) */
  const {T} d = bias + scale * window_sum(x, at, c, channels, inner, before, after);
  const {T} xi = {LOAD_I};
  if (mode == 0) {{ {STORE} (xi * pow(d, -beta)); return; }}
  /* gradient: dx_i = dy_i d_i^-beta - 2 scale beta x_i sum_j dy_j x_j d_j^(-beta-1),
     over the channels j whose window holds c */
  {T} spread = 0;
  for (int j = max(c - after, 0); j <= min(c + before, channels - 1); ++j) {{
    const {T} dj = bias + scale * window_sum(x, at, j, channels, inner, before, after);
    spread += {LOAD_DYJ} * {LOAD_J} * pow(dj, -beta - 1);
  }}
  {STORE} ({LOAD_DYI} * pow(d, -beta) - 2 * scale * beta * xi * spread);
}}

/* the forward pass, one work-item per (image, run of 16 positions): it walks the channels,
   so no element pays a division to find its channel, and reads whole cache lines of each
   (a channel apart, the lines of one position share a cache set: one position per
   work-item evicted them before its neighbour's turn) */
__kernel void lrn_columns(const int runs, const int channels, const int inner,
                          const int before, const int after, const {T} scale, const {T} bias,
                          const {T} beta, __global const {S}* x, const int x_off,
                          __global {S}* out, const int o_off) {{
  const int r = get_global_id(0);
  if (r >= runs) return;
  const int per_image = (inner + 15) / 16, s0 = (r % per_image) * 16;
  const int at = x_off + (r / per_image) * channels * inner + s0;
  const int o_at = o_off + (at - x_off);
  const int lanes = min(16, inner - s0);
  for (int c = 0; c < channels; ++c) {{
    const int lo = max(c - before, 0), hi = min(c + after, channels - 1);
    for (int l = 0; l < lanes; ++l) {{
      {T} total = 0;
      for (int j = lo; j <= hi; ++j) {{
        const {T} v = {LOAD_JL};
        total += v * v;
      }}
      const {T} d = bias + scale * total;
      const {T} xi = {LOAD_CL};
      {STORE_CL} (xi * ({POWER}));
    }}
  }}
}}
"""


def _inverse_power(beta: float) -> str:
    """C for ``d`` to the power -``beta`` in the forward pass: through square roots for the
    betas networks use (AlexNet, ZFNet and GoogLeNet use 0.75), else exp and log. ``pow`` made
    LRN on PoCL 32x slower than NumPy's (95 ms on 96x110x110: 26 with exp and log, 7-10 with
    square roots, of which PoCL's library calls for them are still 4-5); ``d`` is positive
    (a bias plus squares), where these lose nothing of note."""
    if beta == 0.75:
        return "1 / (sqrt(d) * sqrt(sqrt(d)))"
    if beta == 0.5:
        return "1 / sqrt(d)"
    if beta == 1.0:
        return "1 / d"
    return "exp(-beta * log(d))"


def _lrn(x, dy, out, attrs, mode: int) -> None:
    runtime = out.runtime
    x = x.contiguous()
    dy = x if dy is None else dy.contiguous()
    target = out if out.is_contiguous else empty(runtime, out.shape, out.dtype)
    size = attrs["size"]
    before = (size - 1) // 2
    c = ctype(x.dtype)
    code = preamble([x.dtype]) + _LRN.format(
        S=c.storage, T=c.compute, LOAD_J=c.load("x", "at + j * inner"),
        LOAD_I=c.load("x", "x_off + i"),
        LOAD_DYJ=c.load("dy", "dy_off + (at - x_off) + j * inner"),
        LOAD_DYI=c.load("dy", "dy_off + i"), STORE="out[o_off + i] = ",
        LOAD_JL=c.load("x", "at + j * inner + l"), LOAD_CL=c.load("x", "at + c * inner + l"),
        STORE_CL="out[o_at + c * inner + l] = ",
        POWER=_inverse_power(float(attrs["beta"])))
    inner = math.prod(x.shape[2:])
    common = [np.int32(x.shape[1]), np.int32(inner), np.int32(before),
              np.int32(size - 1 - before), c.scalar(attrs["alpha"] / size),
              c.scalar(attrs["bias"]), c.scalar(attrs["beta"]), x.buffer, np.int32(x.offset)]
    if mode == 0:
        runs = (x.shape[0] if x.ndim else 1) * -(-inner // 16)
        runtime.launch1d(runtime.kernel(code, "lrn_columns"), runs, np.int32(runs),
                         *common, target.buffer, np.int32(target.offset))
    else:
        runtime.launch1d(runtime.kernel(code, "lrn"), x.size, np.int32(x.size), *common,
                         dy.buffer, np.int32(dy.offset), target.buffer,
                         np.int32(target.offset), np.int32(mode))
    if target is not out:
        assign(out, target)


@kernel("LRN")
def lrn(ctx, inputs, outputs, attrs):
    _lrn(inputs[0], None, outputs[0], attrs, 0)


@kernel("portable.LRNGrad")
def lrn_grad(ctx, inputs, outputs, attrs):
    dy, x = inputs
    _lrn(x, dy, outputs[0], attrs, 1)


# -- Dropout -----------------------------------------------------------------------------------


def _drop_ratio(ratio, flag, attrs) -> float:
    """The fraction of elements dropped: 0 in inference mode (the op is then a copy)."""
    training = bool(attrs["training_mode"]) or (
        flag is not None and bool(host_value(flag).reshape(-1)[0]))
    if not training:
        return 0.0
    ratio = 0.5 if ratio is None else float(host_value(ratio).reshape(-1)[0])
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"Dropout ratio {ratio} is not in [0, 1)")
    return ratio


@kernel("Dropout", half="native")
def dropout(ctx, inputs, outputs, attrs):
    x = inputs[0]
    y, mask = (list(outputs) + [None])[:2]
    ratio = _drop_ratio(*(list(inputs) + [None, None])[1:3], attrs)
    if ratio == 0.0:
        assign(y, x)
        if mask is not None:
            assign(mask, True)
        return
    # The host generator (seeded by portable.random) draws the mask, as on every backend.
    keep = from_numpy(x.runtime, ctx.rng.random(x.shape, dtype=np.float32) >= ratio)
    apply("MulScaled", x, keep, out=y, params=[1.0 / (1.0 - ratio)])
    if mask is not None:
        assign(mask, keep)


@kernel("portable.DropoutGrad", half="native")
def dropout_grad(ctx, inputs, outputs, attrs):
    dy, mask = inputs[:2]
    ratio = _drop_ratio(*(list(inputs) + [None, None])[2:4], attrs)
    if ratio == 0.0:
        assign(outputs[0], dy)
        return
    apply("MulScaled", dy, mask, out=outputs[0], params=[1.0 / (1.0 - ratio)])
