"""Pooling beyond max and average: LpPool, GlobalLpPool and MaxUnpool.

LpPool slides the windows of MaxPool and AveragePool (``conv.pool_geometry`` resolves pads,
auto_pad, ceil_mode and dilations in one place) and takes each window's p-norm,
``(sum |x|^p)^(1/p)``, padding counting as zeros (as the official ONNX node tests and
onnxruntime do; onnx.reference's LpPool instead rescales an average by the kernel size, which
differs only for windows that reach into padding). MaxUnpool writes MaxPool's values back at
the flat positions MaxPool's Indices give, zeros elsewhere.

Gradients use declared ops: the adjoint of "sum each window" is ConvTranspose with a depthwise
kernel of ones over the same geometry, and MaxUnpool's is a Gather at the indices.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.conv import Geometry, pool_geometry
from portable.ops.registry import Attr, declare
from portable.ops.rules import require_float

_WINDOW_ATTRS = {"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints", None),
                 "pads": Attr("ints", None), "strides": Attr("ints", None),
                 "kernel_shape": Attr("ints"), "ceil_mode": Attr("int", 0)}


def _spatial_input(ctx) -> tuple[int | None, ...]:
    shape = ctx.shape(0)
    if len(shape) < 3:
        ctx.fail(f"input {ctx.op.input_name(0)!r} must be (N, C, D1, ...), got {shape}")
    require_float(ctx, 0)
    return shape


def _check_p(ctx) -> None:
    if ctx.attrs["p"] < 1:
        ctx.fail(f"p={ctx.attrs['p']} must be a positive integer")


def _norm_grad(g, x, y, dy, p: int, spread):
    """dx of y = (sum |x|^p)^(1/p): sign(x) |x|^(p-1) * spread(dy * y^(1-p)), where ``spread``
    carries each window's value back to its elements (the adjoint of the window sum). A window
    of zeros (y = 0) has no derivative; it passes zero."""
    if p == 1:
        scaled = dy
    else:
        zero = g.scalar(0.0, y)
        power = g.emit("Pow", g.emit("Where", g.emit("Equal", y, zero), g.scalar(1.0, y), y),
                       g.scalar(1.0 - p, y))
        scaled = g.emit("Where", g.emit("Equal", y, zero), zero, g.emit("Mul", dy, power))
    back = spread(scaled)
    if p == 1:
        local = g.emit("Sign", x)
    elif p == 2:
        local = x
    else:
        local = g.emit("Mul", g.emit("Sign", x),
                       g.emit("Pow", g.emit("Abs", x), g.scalar(p - 1.0, x)))
    return g.emit("Mul", back, local)


# -- LpPool --------------------------------------------------------------------------------------


def _lp_pool_infer(ctx):
    x = _spatial_input(ctx)
    _check_p(ctx)
    try:
        geom = pool_geometry(x[2:], ctx.attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    return [TensorType(x[:2] + geom.out, ctx.dtype(0))]


def window_sum_adjoint_attrs(geom: Geometry, in_shape: Sequence[int]) -> dict:
    """ConvTranspose attributes that spread each window's value over the input positions it
    reads (the adjoint of summing every window), giving back an input of ``in_shape``: the
    ceil_mode reach is explicit padding; positions no window reads become output_padding."""
    fit = geom.fit_tail(in_shape)
    tail = [max(t, 0) for t in fit]
    return dict(strides=list(geom.strides), dilations=list(geom.dilations),
                pads=list(geom.head) + tail,
                output_padding=[t - f for t, f in zip(tail, fit)])


def _lp_pool_grad(g, dys):
    x, y = g.inputs[0], g.outputs[0]
    shape = g.shape(x)
    geom = pool_geometry(shape[2:], g.attrs)
    ones = g.const(np.ones((shape[1], 1) + geom.kernel, g.dtype(x)))

    def spread(value):
        return g.emit("ConvTranspose", value, ones, group=shape[1],
                      **window_sum_adjoint_attrs(geom, shape[2:]))
    return [_norm_grad(g, x, y, dys[0], g.attrs["p"], spread)]


declare("LpPool", inputs=("X",), outputs=("Y",), infer=_lp_pool_infer, onnx_since=22,
        attrs={**_WINDOW_ATTRS, "p": Attr("int", 2)}, grad=_lp_pool_grad)

# -- GlobalLpPool --------------------------------------------------------------------------------


def _global_lp_pool_infer(ctx):
    x = _spatial_input(ctx)
    _check_p(ctx)
    return [TensorType(x[:2] + (1,) * (len(x) - 2), ctx.dtype(0))]


def _global_lp_pool_grad(g, dys):
    x, y = g.inputs[0], g.outputs[0]
    # (N, C, 1, ...) broadcasts over the spatial axes: Mul does the spreading.
    return [_norm_grad(g, x, y, dys[0], g.attrs["p"], lambda value: value)]


declare("GlobalLpPool", inputs=("X",), outputs=("Y",), infer=_global_lp_pool_infer,
        onnx_since=22, attrs={"p": Attr("int", 2)}, grad=_global_lp_pool_grad)

# -- MaxUnpool -----------------------------------------------------------------------------------


def unpool_shape(x_shape: Sequence[int | None], attrs: Mapping[str, Any]
                 ) -> tuple[int | None, ...]:
    """The (N, C, *spatial) shape MaxUnpool infers (MaxPool's input size without ceil_mode):
    ``(in - 1) * stride - pad_head - pad_tail + kernel`` per spatial axis. The indices address
    this shape; a larger ``output_shape`` input only adds zeros after it, as onnx.reference and
    the official node test have it (onnxruntime 1.32 reads the indices in output_shape's
    layout instead; the two agree when output_shape is the inferred shape).

    Raises:
        ValueError: attributes that do not fit the input's spatial rank, or an empty result.
    """
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    rank = len(kernel)
    if len(x_shape) - 2 != rank:
        raise ValueError(f"kernel_shape={list(kernel)} must have one value per spatial axis "
                         f"of {tuple(x_shape)}")
    strides = tuple(attrs["strides"] or (1,) * rank)
    pads = tuple(attrs["pads"] or (0,) * (2 * rank))
    if len(strides) != rank or len(pads) != 2 * rank:
        raise ValueError(f"strides={list(strides)} and pads={list(pads)} must have {rank} and "
                         f"{2 * rank} values")
    out = []
    for i, n in enumerate(x_shape[2:]):
        size = None if n is None else (n - 1) * strides[i] - pads[i] - pads[rank + i] + kernel[i]
        if size is not None and size < 1:
            raise ValueError(f"spatial axis {i} unpools to {size} elements")
        out.append(size)
    return tuple(x_shape[:2]) + tuple(out)


def _max_unpool_infer(ctx):
    x = _spatial_input(ctx)
    if ctx.dtype(1) != np.int64 or ctx.shape(1) != x:
        ctx.fail(f"I must be int64 of X's shape {x}, got {ctx.type(1)!r}")
    try:
        shape = unpool_shape(x, ctx.attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    if ctx.has(2):
        given = tuple(int(v) for v in np.asarray(ctx.value(2)).reshape(-1))
        if len(given) != len(x) or given[:2] != tuple(x[:2]) or any(
                s is not None and g < s for g, s in zip(given, shape)):
            ctx.fail(f"output_shape {list(given)} must be (N, C, ...) = {x[:2]} and at least "
                     f"the unpooled shape {shape}")
        shape = given
    return [TensorType(shape, ctx.dtype(0))]


def _max_unpool_grad(g, dys):
    x, index = g.inputs[:2]
    dy = dys[0]
    inferred = unpool_shape(g.shape(x), g.attrs)
    if g.shape(dy) != inferred:  # output_shape padded zeros after the unpooled block
        rank = len(inferred)
        dy = g.emit("Slice", dy, g.const(np.zeros(rank, np.int64)),
                    g.const(np.asarray(inferred, np.int64)))
    flat = g.emit("Reshape", dy, g.const(np.asarray([-1], np.int64)))
    # Each X element went to one flat position; its gradient is read back from there.
    return [g.emit("Gather", flat, index, axis=0), None, None]


declare("MaxUnpool", inputs=("X", "I", "output_shape?"), outputs=("output",),
        infer=_max_unpool_infer, onnx_since=22, nondiff_inputs=(1, 2), shape_inputs=(2,),
        attrs={"kernel_shape": Attr("ints"), "pads": Attr("ints", None),
               "strides": Attr("ints", None)},
        grad=_max_unpool_grad,
        doc="Y (zeros) with Y.flat[I] = X: MaxPool's values back at its indices.")
