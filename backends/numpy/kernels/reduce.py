"""NumPy kernels: reductions, written against ``ctx.xp`` in destination-passing style."""
from __future__ import annotations

import numpy as np

from portable.ops.reduce import reduced_axes, topk_order_key

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


def _reduce_kernel(fn_name: str, largest: bool | None = None, keep_dtype: bool = False):
    """A Reduce* kernel. ``largest`` (max: True, min: False) says which identity an empty
    reduction yields, where NumPy raises; ``keep_dtype`` accumulates in the input's dtype."""
    def run(ctx, inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(ctx, inputs, attrs)
        if not axes:
            out[...] = x  # noop_with_empty_axes with no axes: identity
            return
        if x.size == 0 and largest is not None:
            out[...] = _empty_extreme(x.dtype, largest)
            return
        keywords = {"dtype": x.dtype} if keep_dtype else {}
        getattr(ctx.xp, fn_name)(x, axis=axes, keepdims=bool(attrs["keepdims"]), out=out,
                                 **keywords)
    run.__name__ = f"reduce_{fn_name}"
    return run


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


@kernel("portable.TopKGrad")
def topk_grad(ctx, inputs, outputs, attrs):
    dx = outputs[0]
    dx[...] = 0
    ctx.xp.put_along_axis(dx, inputs[1], inputs[0], axis=attrs["axis"])
