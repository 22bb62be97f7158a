"""Convolution and pooling: Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool,
GlobalMaxPool, and the private ops their gradients need (ConvGradWeight, MaxPoolGrad,
AveragePoolGrad).

Every op here slides a window over the spatial axes of an (N, C, D1, ..., Dn) tensor. Where the
windows lie is one piece of data, a ``Geometry`` computed from the input shape and the attributes
by the functions below; the type rules, the gradient rules and the kernels all read the same
``Geometry``, so padding, ceil_mode and auto_pad are resolved in one place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import dtypes_of, require_float, same_dtype

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Geometry:
    """Where the windows lie along each spatial axis.

    Window ``o`` of axis ``i`` reads input positions ``o * strides[i] - head[i] + j *
    dilations[i]`` for ``j < kernel[i]``; positions outside the input read as padding. ``tail``
    is the padding declared (or derived from auto_pad) after the input; for ConvTranspose it is
    the ONNX pad that the output shape implies, and may be negative (the output grows).
    ``None`` entries of ``out`` are unknown (symbolic input dims).
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    head: tuple[int, ...]
    tail: tuple[int, ...]
    out: tuple[int | None, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """The span of one dilated window along each axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def fit_tail(self, in_shape: Sequence[int]) -> tuple[int, ...]:
        """Padding after the input (negative: cropping) that makes the padded input exactly as
        long as the windows reach: ceil_mode windows may need more than the declared tail,
        and floor division leaves unread positions at the end."""
        return tuple((o - 1) * s + e - n - h for o, s, e, n, h in
                     zip(self.out, self.strides, self.extent, in_shape, self.head))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints(attrs: Mapping[str, Any], key: str, count: int, default: int,
          minimum: int) -> tuple[int, ...]:
    value = attrs.get(key)
    if value is None:
        return (default,) * count
    value = tuple(int(v) for v in value)
    if len(value) != count:
        raise ValueError(f"attribute {key}={list(value)} must have {count} values")
    if any(v < minimum for v in value):
        raise ValueError(f"attribute {key}={list(value)} must be >= {minimum}")
    return value


def window_attrs(attrs: Mapping[str, Any], kernel: Sequence[int]):
    """Strides, dilations, explicit pads and auto_pad, validated against the kernel's rank."""
    rank = len(kernel)
    if any(k < 1 for k in kernel):
        raise ValueError(f"kernel shape {list(kernel)} must be positive")
    strides = _ints(attrs, "strides", rank, 1, 1)
    dilations = _ints(attrs, "dilations", rank, 1, 1)
    pads = _ints(attrs, "pads", 2 * rank, 0, 0)
    auto_pad = _text(attrs.get("auto_pad", "NOTSET"))
    if auto_pad not in AUTO_PADS:
        raise ValueError(f"auto_pad={auto_pad!r} is not one of {AUTO_PADS}")
    return strides, dilations, pads[:rank], pads[rank:], auto_pad


def _same_split(total: int, auto_pad: str) -> tuple[int, int]:
    """SAME_UPPER puts the odd padding element at the end, SAME_LOWER (and ConvTranspose's
    ``output_shape`` under NOTSET) at the start."""
    head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    return head, total - head


def window_geometry(in_shape: Sequence[int | None], kernel: Sequence[int],
                    attrs: Mapping[str, Any], ceil_mode: bool = False) -> Geometry:
    """Geometry of Conv and of the pools. Raises ValueError on bad attributes or when the
    input is too small for one window."""
    kernel = tuple(int(k) for k in kernel)
    strides, dilations, head, tail, auto_pad = window_attrs(attrs, kernel)
    heads, tails, outs = list(head), list(tail), []
    for i, n in enumerate(in_shape):
        s, e = strides[i], (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = None if n is None else -(-n // s)
            total = 0 if n is None else max(0, (out - 1) * s + e - n)
            heads[i], tails[i] = _same_split(total, auto_pad)
        elif n is None:
            out = None
        else:
            if auto_pad == "VALID":
                heads[i] = tails[i] = 0
            span = n + heads[i] + tails[i] - e
            out = (-(-span // s) if ceil_mode else span // s) + 1
            # ONNX (and PyTorch) drop a ceil_mode window that would start in the tail padding.
            if ceil_mode and auto_pad == "NOTSET" and (out - 1) * s >= n + heads[i]:
                out -= 1
        if out is not None and out < 1:
            raise ValueError(f"spatial input {tuple(in_shape)} is smaller than the window "
                             f"{kernel} (dilations {dilations}, pads {head + tail})")
        outs.append(out)
    return Geometry(kernel, strides, dilations, tuple(heads), tuple(tails), tuple(outs))


def transpose_geometry(in_shape: Sequence[int | None], kernel: Sequence[int],
                       attrs: Mapping[str, Any]) -> Geometry:
    """Geometry of ConvTranspose, seen as the Conv whose input gradient it is: ``out`` is
    ConvTranspose's output size, and ``head``/``tail`` the pads that Conv has on it.

    As the ONNX spec says, ``output_shape`` (or SAME_* without it: input size times stride)
    fixes the size and the pads follow from it: the total is split with the larger half at the
    end under SAME_UPPER and at the start otherwise. A head pad below zero is clamped, as
    onnxruntime does, so an output larger than the input reaches grows at the end.
    """
    kernel = tuple(int(k) for k in kernel)
    strides, dilations, head, tail, auto_pad = window_attrs(attrs, kernel)
    rank = len(kernel)
    adjust = _ints(attrs, "output_padding", rank, 0, 0)
    shape = attrs.get("output_shape")
    if shape is not None:
        shape = tuple(int(v) for v in shape)[-rank:]  # some exporters include N and C
        if len(shape) != rank:
            raise ValueError(f"output_shape={list(shape)} must have {rank} spatial values")
    same = auto_pad in ("SAME_UPPER", "SAME_LOWER")
    heads, tails, outs = list(head), list(tail), []
    for i, n in enumerate(in_shape):
        e = (kernel[i] - 1) * dilations[i] + 1
        full = None if n is None else strides[i] * (n - 1) + adjust[i] + e
        if auto_pad == "VALID":
            heads[i] = tails[i] = 0
        if shape or same:
            out = shape[i] if shape else None if n is None else n * strides[i]
            if full is not None:
                heads[i] = max(0, _same_split(full - out, auto_pad)[0])
        else:
            out = None if full is None else full - heads[i] - tails[i]
        if full is not None:
            tails[i] = full - heads[i] - out
        if out is not None and out < 1:
            raise ValueError(f"output size {out} along spatial axis {i} is not positive")
        outs.append(out)
    return Geometry(kernel, strides, dilations, tuple(heads), tuple(tails), tuple(outs))


def output_padding(geom: Geometry, in_shape: Sequence[int]) -> tuple[int, ...]:
    """The output_padding under which ConvTranspose, with this Conv geometry's pads, gives back
    an input of ``in_shape``: the input positions past the last full stride step."""
    return tuple((n + h + t - e) % s for n, h, t, e, s in
                 zip(in_shape, geom.head, geom.tail, geom.extent, geom.strides))


def _check(ctx, fn, *args, **kwargs):
    """Run a geometry function, turning its ValueError into a ShapeError naming the node."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        ctx.fail(str(exc))


def _spatial_input(ctx, index: int = 0) -> tuple[int | None, ...]:
    shape = ctx.shape(index)
    if len(shape) < 3:
        ctx.fail(f"input {ctx.op.input_name(index)!r} must be (N, C, D1, ...), got {shape}")
    return shape


def _known_differ(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and a != b


def _check_kernel(ctx, w: tuple[int | None, ...], x: tuple[int | None, ...]) -> tuple[int, ...]:
    """The kernel's spatial shape from W, checked against X's rank and kernel_shape."""
    if len(w) != len(x):
        ctx.fail(f"W has rank {len(w)}, X has rank {len(x)}; they must match")
    kernel = w[2:]
    if any(k is None for k in kernel):
        ctx.fail(f"W's spatial shape {kernel} must be static")
    declared = ctx.attrs["kernel_shape"]
    if declared is not None and tuple(declared) != tuple(kernel):
        ctx.fail(f"kernel_shape={list(declared)} differs from W's spatial shape {kernel}")
    if ctx.attrs["group"] < 1:
        ctx.fail(f"group={ctx.attrs['group']} must be positive")
    return kernel


def _check_bias(ctx, channels: int | None) -> None:
    if ctx.has(2) and (len(ctx.shape(2)) != 1 or _known_differ(ctx.shape(2)[0], channels)):
        ctx.fail(f"B must have shape ({channels},), got {ctx.shape(2)}")


def _conv_dtype(ctx):
    require_float(ctx, 0)
    return same_dtype(ctx, (0, 1, 2))


# -- Conv ----------------------------------------------------------------------------------------

_WINDOW_ATTRS = {"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints", None),
                 "pads": Attr("ints", None), "strides": Attr("ints", None)}
_CONV_ATTRS = {**_WINDOW_ATTRS, "group": Attr("int", 1), "kernel_shape": Attr("ints", None)}


def _conv_infer(ctx):
    x, w = _spatial_input(ctx), ctx.shape(1)
    kernel = _check_kernel(ctx, w, x)
    group = ctx.attrs["group"]
    if _known_differ(x[1], None if w[1] is None else w[1] * group) or \
            (w[0] is not None and w[0] % group):
        ctx.fail(f"X has {x[1]} channels and W is {w}: W must be (M, C/group, ...) with M "
                 f"divisible by group={group}")
    _check_bias(ctx, w[0])
    geom = _check(ctx, window_geometry, x[2:], kernel, ctx.attrs)
    return [TensorType((x[0], w[0]) + geom.out, _conv_dtype(ctx))]


def _explicit(geom: Geometry, tail: Sequence[int] | None = None, **extra) -> dict:
    """Attributes that repeat a resolved geometry with explicit pads (no auto_pad)."""
    tail = geom.tail if tail is None else tail
    return dict(strides=list(geom.strides), dilations=list(geom.dilations),
                pads=list(geom.head) + list(tail), **extra)


def _bias_grad(g, dy):
    axes = [0] + list(range(2, len(g.shape(dy))))
    return g.emit("ReduceSum", dy, g.const(np.asarray(axes, np.int64)), keepdims=0)


def _conv_grad(g, dys):
    x, w = g.inputs[:2]
    dy, group = dys[0], g.attrs["group"]
    x_shape, kernel = g.shape(x), g.shape(w)[2:]
    geom = window_geometry(x_shape[2:], kernel, g.attrs)
    # Conv's adjoint in X is ConvTranspose with the same W and pads; output_padding restores
    # the input positions that no window reached.
    dx = g.emit("ConvTranspose", dy, w, group=group,
                **_explicit(geom, output_padding=list(output_padding(geom, x_shape[2:]))))
    dw = g.emit("portable.ConvGradWeight", x, dy, group=group,
                **_explicit(geom, kernel_shape=list(kernel)))
    db = _bias_grad(g, dy) if len(g.inputs) > 2 and g.inputs[2] is not None else None
    return [dx, dw, db]


declare("Conv", inputs=("X", "W", "B?"), outputs=("Y",), infer=_conv_infer, onnx_since=22,
        attrs=_CONV_ATTRS, grad=_conv_grad)

# -- ConvTranspose -------------------------------------------------------------------------------

_CONV_TRANSPOSE_ATTRS = {**_CONV_ATTRS, "output_padding": Attr("ints", None),
                         "output_shape": Attr("ints", None)}


def _conv_transpose_infer(ctx):
    x, w = _spatial_input(ctx), ctx.shape(1)
    kernel = _check_kernel(ctx, w, x)
    group = ctx.attrs["group"]
    if _known_differ(x[1], w[0]) or (w[0] is not None and w[0] % group):
        ctx.fail(f"X has {x[1]} channels and W is {w}: W must be (C, M/group, ...) with C "
                 f"divisible by group={group}")
    channels = None if w[1] is None else w[1] * group
    _check_bias(ctx, channels)
    geom = _check(ctx, transpose_geometry, x[2:], kernel, ctx.attrs)
    return [TensorType((x[0], channels) + geom.out, _conv_dtype(ctx))]


def _conv_transpose_grad(g, dys):
    x, w = g.inputs[:2]
    dy, group = dys[0], g.attrs["group"]
    x_shape, kernel = g.shape(x), g.shape(w)[2:]
    geom = transpose_geometry(x_shape[2:], kernel, g.attrs)
    # ConvTranspose's adjoint in X is Conv with the same W. A negative tail (the output grew
    # past what X reaches) becomes zero; the windows that adds, or that an output_padding of a
    # stride or more adds, are cut off by a Slice.
    tail = [max(t, 0) for t in geom.tail]
    dx = g.emit("Conv", dy, w, group=group, **_explicit(geom, tail))
    if g.shape(dx) != x_shape:
        rank = len(kernel)
        dx = g.emit("Slice", dx, g.const(np.zeros(rank, np.int64)),
                    g.const(np.asarray(x_shape[2:], np.int64)),
                    g.const(np.arange(2, 2 + rank, dtype=np.int64)))
    # The weight gradient correlates dY's windows with X: ConvGradWeight with the roles of its
    # two inputs swapped gives W's (C, M/group, ...) layout directly.
    dw = g.emit("portable.ConvGradWeight", dy, x, group=group,
                **_explicit(geom, tail, kernel_shape=list(kernel)))
    db = _bias_grad(g, dy) if len(g.inputs) > 2 and g.inputs[2] is not None else None
    return [dx, dw, db]


declare("ConvTranspose", inputs=("X", "W", "B?"), outputs=("Y",), infer=_conv_transpose_infer,
        onnx_since=22, attrs=_CONV_TRANSPOSE_ATTRS, grad=_conv_transpose_grad)

# -- ConvGradWeight (private) --------------------------------------------------------------------


def _conv_grad_weight_infer(ctx):
    x, dy = _spatial_input(ctx, 0), _spatial_input(ctx, 1)
    kernel = tuple(ctx.attrs["kernel_shape"])
    group = ctx.attrs["group"]
    if len(x) != len(dy) or len(kernel) != len(x) - 2:
        ctx.fail(f"X, dY and kernel_shape={list(kernel)} must have the same spatial rank")
    if group < 1 or any(c is not None and c % group for c in (x[1], dy[1])):
        ctx.fail(f"channels of X and dY must be divisible by group={group}")
    _check(ctx, window_attrs, ctx.attrs, kernel)
    channels = None if x[1] is None else x[1] // group
    return [TensorType((dy[1], channels) + kernel, same_dtype(ctx, (0, 1)))]


declare("ConvGradWeight", domain="portable", inputs=("X", "dY"), outputs=("dW",),
        infer=_conv_grad_weight_infer,
        attrs={"kernel_shape": Attr("ints"), "strides": Attr("ints", None),
               "pads": Attr("ints", None), "dilations": Attr("ints", None),
               "group": Attr("int", 1)},
        doc="dW[m, c, k] = sum over n, o of dY[n, m, o] * X[n, group(m) * C/group + c, "
            "o * strides - pads_begin + k * dilations] (X is zero outside its extent).")

# -- pooling -------------------------------------------------------------------------------------

_POOL_ATTRS = {**_WINDOW_ATTRS, "kernel_shape": Attr("ints"), "ceil_mode": Attr("int", 0)}
_MAX_POOL_ATTRS = {**_POOL_ATTRS, "storage_order": Attr("int", 0)}
_AVERAGE_POOL_ATTRS = {**_POOL_ATTRS, "count_include_pad": Attr("int", 0)}


def pool_geometry(in_shape: Sequence[int | None], attrs: Mapping[str, Any]) -> Geometry:
    """Geometry of MaxPool and AveragePool (and their gradients)."""
    kernel = tuple(attrs["kernel_shape"])
    if len(kernel) != len(in_shape):
        raise ValueError(f"kernel_shape={list(kernel)} must have one value per spatial axis "
                         f"of {tuple(in_shape)}")
    return window_geometry(in_shape, kernel, attrs, ceil_mode=bool(attrs["ceil_mode"]))


def _pool_infer(ctx):
    x = _spatial_input(ctx)
    geom = _check(ctx, pool_geometry, x[2:], ctx.attrs)
    y = TensorType(x[:2] + geom.out, ctx.dtype(0))
    return [y, TensorType(y.shape, np.int64)][:len(ctx.node.outputs)]


def _pool_grad_infer(ctx):
    dy, x = _spatial_input(ctx, 0), _spatial_input(ctx, 1)
    geom = _check(ctx, pool_geometry, x[2:], ctx.attrs)
    if any(_known_differ(a, b) for a, b in zip(dy, x[:2] + geom.out)):
        ctx.fail(f"dY has shape {dy}; the pool of X gives {x[:2] + geom.out}")
    return [TensorType(x, same_dtype(ctx, (0, 1)))]


def _without(attrs: Mapping[str, Any], *keys: str) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs.items()
            if k not in keys and v is not None}


def _max_pool_grad(g, dys):
    # Indices (output 1) are integers: only Y's gradient flows, to each window's argmax.
    dx = g.emit("portable.MaxPoolGrad", dys[0], g.inputs[0],
                **_without(g.attrs, "storage_order"))
    return [dx]


def _average_pool_grad(g, dys):
    return [g.emit("portable.AveragePoolGrad", dys[0], g.inputs[0], **_without(g.attrs))]


declare("MaxPool", inputs=("X",), outputs=("Y", "Indices?"), infer=_pool_infer,
        onnx_since=22, attrs=_MAX_POOL_ATTRS, grad=_max_pool_grad,
        dtype_rule=dtypes_of("data", np.int64))
declare("AveragePool", inputs=("X",), outputs=("Y",), infer=_pool_infer, onnx_since=22,
        attrs=_AVERAGE_POOL_ATTRS, grad=_average_pool_grad)
declare("MaxPoolGrad", domain="portable", inputs=("dY", "X"), outputs=("dX",),
        infer=_pool_grad_infer, attrs=_POOL_ATTRS,
        doc="Routes each window's gradient to the window's first maximum (MaxPool's Indices).")
declare("AveragePoolGrad", domain="portable", inputs=("dY", "X"), outputs=("dX",),
        infer=_pool_grad_infer, attrs=_AVERAGE_POOL_ATTRS, ignored_inputs=(1,),
        doc="Spreads each window's gradient evenly over the elements AveragePool divided by.")

# -- global pooling ------------------------------------------------------------------------------


def _global_pool_infer(ctx):
    x = _spatial_input(ctx)
    return [TensorType(x[:2] + (1,) * (len(x) - 2), ctx.dtype(0))]


def _global_average_pool_grad(g, dys):
    x = g.inputs[0]
    shape = g.shape(x)
    spread = g.emit("Expand", dys[0], g.const(np.asarray(shape, np.int64)))
    return [g.emit("Mul", spread, g.scalar(1.0 / math.prod(shape[2:]), x))]


def _global_max_pool_grad(g, dys):
    x = g.inputs[0]
    # One window covering every spatial position: MaxPool's routing to the argmax.
    return [g.emit("portable.MaxPoolGrad", dys[0], x, kernel_shape=list(g.shape(x)[2:]))]


declare("GlobalAveragePool", inputs=("X",), outputs=("Y",), infer=_global_pool_infer,
        onnx_since=22, grad=_global_average_pool_grad)
declare("GlobalMaxPool", inputs=("X",), outputs=("Y",), infer=_global_pool_infer,
        onnx_since=22, grad=_global_max_pool_grad)
