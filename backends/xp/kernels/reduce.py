"""NumPy kernels: reductions, written against ``ctx.xp`` in destination-passing style."""
from __future__ import annotations

import math

import numpy as np

from portable.ops.reduce import cumsum_axis, reduced_axes, topk_order_key

from portable.backend import kernel_table

kernels, kernel = kernel_table()


def _axes(ctx, inputs, attrs):
    axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    return reduced_axes(inputs[0].ndim, None if axes is None else ctx.backend.to_numpy(axes),
                        attrs["noop_with_empty_axes"])


def _empty_extreme(dtype: np.dtype, largest: bool):
    """What ONNX reduces an empty set to: the identity of max (smallest value) or min."""
    if dtype.kind == "b":
        return not largest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


# Reduced elements per output up to which a sum over trailing axes runs as a matrix-vector
# product with a ones vector. NumPy reduces a short contiguous inner axis one output at a time
# (np.add.reduce of (1280, 4) along axis 1: 19 us; np.mean of (1, 1280, 2, 2) over (2, 3):
# 25 us, of (1, 512, 7, 7): 15 us); BLAS's gemv does the same sums in 3-6 us. Longer runs stay
# with NumPy, whose pairwise summation rounds less than gemv's running sums.
SHORT_REDUCTION = 64
_GEMV_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def short_trailing_sum(xp, x, axes: tuple[int, ...], out, limit: int = SHORT_REDUCTION) -> int:
    """Sum ``x`` over ``axes`` into ``out`` as ``x (rows, k) @ ones(k)`` when ``axes`` are
    x's last axes, together 2 to ``limit`` elements, and both arrays are contiguous
    float32/float64; returns k, or 0 having written nothing (any other case)."""
    rank = x.ndim
    if (not axes or axes[0] != rank - len(axes) or x.dtype not in _GEMV_DTYPES
            or out.dtype != x.dtype or x.size == 0):
        return 0
    k = math.prod(x.shape[axes[0]:])
    if not (1 < k <= limit and x.flags.c_contiguous and out.flags.c_contiguous):
        return 0
    xp.matmul(x.reshape(-1, k), xp.ones(k, dtype=x.dtype), out=out.reshape(-1))
    return k


def _reduce_kernel(fn_name: str, largest: bool | None = None, keep_dtype: bool = False):
    """A Reduce* kernel. ``largest`` (max: True, min: False) says which identity an empty
    reduction yields, where NumPy raises; ``keep_dtype`` accumulates in the input's dtype.
    Sum and mean over a few trailing elements run as a matrix-vector product
    (``short_trailing_sum``): the mean then divides by the count, as NumPy's does."""
    short = fn_name in ("sum", "mean")

    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(ctx, inputs, attrs)
        if not axes:
            out[...] = x  # noop_with_empty_axes with no axes: identity
            return
        if x.size == 0 and largest is not None:
            out[...] = _empty_extreme(x.dtype, largest)
            return
        if short:
            count = short_trailing_sum(ctx.xp, x, axes, out)
            if count:
                if fn_name == "mean":
                    ctx.xp.divide(out, count, out=out)
                return
        keywords = {"dtype": x.dtype} if keep_dtype else {}
        getattr(ctx.xp, fn_name)(x, axis=axes, keepdims=bool(attrs["keepdims"]), out=out,
                                 **keywords)
    run.__name__ = f"reduce_{fn_name}"
    return run


def _transformed_kernel(name: str, transform, reduce_name: str, finish=None):
    """A reduction of ``transform(x)`` (sum or product, in x's dtype), then ``finish``; no
    axes with noop_with_empty_axes leaves just the transform, as ONNX defines it."""
    def run(ctx, inputs, outputs, attrs):
        xp, x = ctx.xp, inputs[0]
        value = getattr(xp, reduce_name)(transform(xp, x), axis=_axes(ctx, inputs, attrs),
                                         keepdims=bool(attrs["keepdims"]), dtype=x.dtype)
        outputs[0][...] = value if finish is None else finish(xp, value)
    run.__name__ = name
    return run


kernel("ReduceSumSquare")(_transformed_kernel("reduce_sum_square", lambda xp, x: x * x, "sum"))
kernel("ReduceL1")(_transformed_kernel("reduce_l1", lambda xp, x: xp.abs(x), "sum"))
kernel("ReduceL2")(_transformed_kernel("reduce_l2", lambda xp, x: x * x, "sum",
                                       lambda xp, v: xp.sqrt(v)))
kernel("ReduceProd")(_transformed_kernel("reduce_prod", lambda xp, x: x, "prod"))
kernel("ReduceLogSum")(_transformed_kernel("reduce_log_sum", lambda xp, x: x, "sum",
                                           lambda xp, v: xp.log(v)))


@kernel("ReduceLogSumExp")
def reduce_log_sum_exp(ctx, inputs, outputs, attrs):
    xp, x, out = ctx.xp, inputs[0], outputs[0]
    axes = _axes(ctx, inputs, attrs)
    if x.size == 0:
        out[...] = -np.inf  # (the log of an empty sum)
        return
    # shifted by the largest element, so exp cannot overflow
    top = xp.max(x, axis=axes, keepdims=True)
    top = xp.where(xp.isfinite(top), top, 0)
    total = xp.sum(xp.exp(x - top), axis=axes, keepdims=True, dtype=x.dtype)
    value = xp.log(total) + top
    out[...] = value if attrs["keepdims"] else value.reshape(out.shape)


kernel("ReduceSum")(_reduce_kernel("sum"))
# ONNX (and onnx.reference) accumulate the mean in the input's dtype.
kernel("ReduceMean")(_reduce_kernel("mean", keep_dtype=True))
kernel("ReduceMax")(_reduce_kernel("max", largest=True))
kernel("ReduceMin")(_reduce_kernel("min", largest=False))


def _arg_kernel(fn_name: str):
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axis = attrs["axis"] % x.ndim
        keepdims = bool(attrs["keepdims"])
        fn = getattr(ctx.xp, fn_name)
        if not attrs["select_last_index"]:
            fn(x, axis=axis, out=out, keepdims=keepdims)
            return
        # NumPy picks the first extreme; search the reversed axis and map the index back.
        fn(ctx.xp.flip(x, axis), axis=axis, out=out, keepdims=keepdims)
        ctx.xp.subtract(x.shape[axis] - 1, out, out=out)
    run.__name__ = fn_name
    return run


kernel("ArgMax")(_arg_kernel("argmax"))
kernel("ArgMin")(_arg_kernel("argmin"))


@kernel("TopK")
def topk(ctx, inputs, outputs, attrs):
    xp, x = ctx.xp, inputs[0]
    axis = attrs["axis"] % x.ndim
    k = outputs[0].shape[axis]
    key = topk_order_key(x, bool(attrs["largest"]))
    order = xp.argsort(key, axis=axis, kind="stable")
    chosen = xp.take(order, xp.arange(k), axis=axis)
    outputs[1][...] = chosen
    outputs[0][...] = xp.take_along_axis(x, chosen, axis=axis)


def _scan_kernel(name: str, identity: int):
    def run(ctx, inputs, outputs, attrs):
        xp, x, out = ctx.xp, inputs[0], outputs[0]
        axis = cumsum_axis(ctx.backend.to_numpy(inputs[1]), x.ndim)
        source = xp.flip(x, axis) if attrs["reverse"] else x
        total = getattr(xp, name)(source, axis=axis, dtype=x.dtype)
        if attrs["exclusive"]:  # each result without its own element: shifted by one place
            later, earlier = ([slice(None)] * x.ndim for _ in range(2))
            later[axis], earlier[axis] = slice(1, None), slice(None, -1)
            shifted = xp.full_like(total, identity)
            shifted[tuple(later)] = total[tuple(earlier)]
            total = shifted
        out[...] = xp.flip(total, axis) if attrs["reverse"] else total
    run.__name__ = name
    return run


kernel("CumSum")(_scan_kernel("cumsum", 0))
kernel("CumProd")(_scan_kernel("cumprod", 1))
