"""Neural-network ops: normalisation (BatchNormalization, LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LRN), Dropout, Softmax and LogSoftmax.

Mode-dependent ops (BatchNormalization, Dropout) declare a ``training_mode`` facet that rewrites
one node for training or inference; ``portable.passes.training`` applies it to a whole graph.

Our canonical Dropout adds one attribute to ONNX's: ``training_mode`` (int, default 0). The node
is in training mode when the attribute is 1 or its ``training_mode`` input is true. The facet
sets the attribute and drops the input, so the mode is static after it. Export: a node with
``training_mode=1`` gets a constant ``true`` third input and loses the attribute; with 0 the
attribute is dropped and any ``training_mode`` input kept. The ``seed`` attribute is kept for
round trips, but the mask is drawn from ``portable.random``'s generator (one seed for a run).

Gradients that would need many passes over the data in public ops (training-mode batch norm,
layer norm, LRN, training-mode Dropout) use private ops whose kernels do it in one.
"""
from __future__ import annotations

import numpy as np

from portable.dtypes import ONNX_DTYPES
from portable.errors import NotDifferentiableError, PortableError
from portable.ir.graph import Node, TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import (broadcast_shapes, dtypes_of, normalize_axis, require_float,
                                same_as_input)


def _int64(values) -> np.ndarray:
    return np.asarray(values, np.int64)


def _optional(handles, index):
    """``handles[index]``, or None when that optional input, output or gradient is absent."""
    return handles[index] if index < len(handles) else None


# -- BatchNormalization ----------------------------------------------------------------------


def channel_axes(rank: int) -> tuple[int, ...]:
    """The axes BatchNormalization reduces over: all but the channel axis 1 (rank 1: C is 1)."""
    return (0,) if rank == 1 else (0,) + tuple(range(2, rank))


def channel_shape(rank: int, channels: int) -> tuple[int, ...]:
    """The shape a per-channel (C,) tensor takes to broadcast against an (N, C, ...) input."""
    return (channels,) + (1,) * max(rank - 2, 0)


def _batch_norm_infer(ctx):
    x = ctx.shape(0)
    require_float(ctx, 0)
    if not x:
        ctx.fail("X must have rank >= 1 (N, C, D1, ...)")
    channels = 1 if len(x) == 1 else x[1]
    for i in range(1, 5):
        require_float(ctx, i)
        if ctx.shape(i) != (channels,):
            ctx.fail(f"input {ctx.op.input_name(i)!r} must have shape ({channels},), "
                     f"got {ctx.shape(i)}")
    # Inference outputs only Y in ONNX; should a node ask for the running statistics anyway
    # (imperative calls name every output), they pass through unchanged.
    return [ctx.type(0), ctx.type(3), ctx.type(4)]


def _batch_norm_dtype(ctx):
    # MXNet's BatchNormType: parameters and statistics not known yet take the data's
    # accumulation dtype (float32 for float16 data); the type rule accepts any float ones.
    x = ctx.unify([0], [0])
    if x is not None:
        for i in range(1, 5):
            if ctx.has(i) and ctx.inputs[i] is None:
                ctx.inputs[i] = np.dtype(np.float32) if x == np.float16 else x
    return [x, ctx.dtype(3), ctx.dtype(4)][:len(ctx.outputs)]


def _batch_norm_training_mode(node: Node, training: bool) -> Node:
    # Inference has only Y (ONNX calls extra outputs invalid); in training the running
    # statistics outputs are added by portable.passes.training from the `mutates` pairs.
    attrs = {**node.attrs, "training_mode": int(training)}
    return node.replace(attrs=attrs, outputs=node.outputs if training else node.outputs[:1])


def _batch_norm_grad(g, dys):
    x, scale, _, mean, var = g.inputs
    d_mean, d_var = _optional(dys, 1), _optional(dys, 2)
    if not g.attrs["training_mode"]:
        grads = _batch_norm_inference_grad(g, dys[0])
        # running statistics asked for in inference are the inputs passed through
        return grads[:3] + [grads[i] if d is None else g.emit("Add", grads[i], d)
                            for i, d in ((3, d_mean), (4, d_var))]
    dx, dscale, dbias = g.emit("portable.BatchNormalizationGrad", dys[0], x, scale, d_mean,
                               d_var, num_outputs=3, epsilon=g.attrs["epsilon"],
                               momentum=g.attrs["momentum"])
    momentum = g.attrs["momentum"]
    # running = input * momentum + batch statistic * (1 - momentum)
    carry = [None if d is None else g.emit("Mul", d, g.scalar(momentum, d))
             for d in (d_mean, d_var)]
    return [dx, dscale, dbias] + carry


def _batch_norm_inference_grad(g, dy):
    """Y = k (X - mean) + B with k = scale / sqrt(var + eps), per channel."""
    x, scale, _, mean, var = g.inputs
    rank = len(g.shape(x))
    per_channel = g.const(_int64(channel_shape(rank, g.shape(scale)[0])))
    axes = g.const(_int64(channel_axes(rank)))
    var_eps = g.emit("Add", var, g.scalar(g.attrs["epsilon"], var))
    std = g.emit("Sqrt", var_eps)
    k = g.emit("Div", scale, std)
    dx = g.emit("Mul", dy, g.emit("Reshape", k, per_channel))
    dbias = g.emit("ReduceSum", dy, axes, keepdims=0)
    centered = g.emit("Sub", x, g.emit("Reshape", mean, per_channel))
    dy_centered = g.emit("ReduceSum", g.emit("Mul", dy, centered), axes, keepdims=0)
    dscale = g.emit("Div", dy_centered, std)
    dmean = g.emit("Neg", g.emit("Mul", dbias, k))
    # d/dvar of (var + eps)^-1/2 is -1/2 (var + eps)^-3/2
    dvar = g.emit("Mul", g.emit("Div", g.emit("Mul", dy_centered, k), var_eps),
                  g.scalar(-0.5, var))
    return [dx, dscale, dbias, dmean, dvar]


_BATCH_NORM_ATTRS = {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9)}

declare("BatchNormalization", inputs=("X", "scale", "B", "input_mean", "input_var"),
        outputs=("Y", "running_mean?", "running_var?"), infer=_batch_norm_infer,
        attrs={**_BATCH_NORM_ATTRS, "training_mode": Attr("int", 0)}, onnx_since=15,
        grad=_batch_norm_grad, inplace=((0, 0),), mutates=((1, 3), (2, 4)),
        training_mode=_batch_norm_training_mode, dtype_rule=_batch_norm_dtype)


def _batch_norm_grad_infer(ctx):
    return [ctx.type(1), ctx.type(2), ctx.type(2)]


declare("BatchNormalizationGrad", domain="portable",
        inputs=("dY", "X", "scale", "d_running_mean?", "d_running_var?"),
        outputs=("dX", "d_scale", "dB"), infer=_batch_norm_grad_infer, attrs=_BATCH_NORM_ATTRS,
        inplace=((0, 0),),
        doc="Training-mode BatchNormalization gradient; batch statistics are recomputed from X.")

# -- LayerNormalization ----------------------------------------------------------------------


def _layer_norm_axis(ctx) -> int:
    return normalize_axis(ctx, ctx.attrs["axis"], len(ctx.shape(0)))


def _check_normalisation(ctx, params: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """X float, a float stash_type, and each parameter input (Scale, B) of X's dtype,
    broadcasting to the normalised axes X.shape[axis:]. Returns X's shape and the axis."""
    require_float(ctx, 0)
    x = ctx.shape(0)
    axis = _layer_norm_axis(ctx)
    if ONNX_DTYPES.get(ctx.attrs["stash_type"], np.dtype(np.int8)).kind != "f":
        ctx.fail(f"stash_type={ctx.attrs['stash_type']} is not a floating-point element type")
    normalized = x[axis:]
    for i in params:
        if not ctx.has(i):
            continue
        if ctx.dtype(i) != ctx.dtype(0):
            ctx.fail(f"input {ctx.op.input_name(i)!r} must have X's dtype {ctx.dtype(0)}")
        shape = ctx.shape(i)
        # unidirectional broadcasting to X, constant over the axes before `axis`
        if (broadcast_shapes(ctx, [shape, x]) != x
                or any(d != 1 for d in shape[:max(len(shape) - len(normalized), 0)])):
            ctx.fail(f"input {ctx.op.input_name(i)!r} of shape {shape} does not broadcast "
                     f"to X's normalised axes {normalized}")
    return x, axis


def _layer_norm_infer(ctx):
    x, axis = _check_normalisation(ctx, (1, 2))
    # Mean and InvStdDev take X's dtype, as onnx.reference computes them.
    stats = TensorType(x[:axis] + (1,) * (len(x) - axis), ctx.dtype(0))
    return [ctx.type(0), stats, stats]


def _layer_norm_grad(g, dys):
    x, scale = g.inputs[:2]
    bias = _optional(g.inputs, 2)
    dy = dys[0]
    dx, dscale = g.emit("portable.LayerNormalizationGrad", dy, x, scale, _optional(dys, 1),
                        _optional(dys, 2), num_outputs=2, **g.attrs)
    return [dx, g.sum_to(dscale, scale), None if bias is None else g.sum_to(dy, bias)]


_LAYER_NORM_ATTRS = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5),
                     "stash_type": Attr("int", 1)}

declare("LayerNormalization", inputs=("X", "Scale", "B?"), outputs=("Y", "Mean?", "InvStdDev?"),
        infer=_layer_norm_infer, attrs=_LAYER_NORM_ATTRS, onnx_since=17, grad=_layer_norm_grad,
        inplace=((0, 0),))


def _layer_norm_grad_infer(ctx):
    normalized = ctx.shape(1)[_layer_norm_axis(ctx):]
    # Scale may carry leading 1s beyond the normalised axes; d_scale keeps Scale's rank.
    lead = max(len(ctx.shape(2)) - len(normalized), 0)
    return [ctx.type(1), TensorType((1,) * lead + normalized, ctx.dtype(2))]


declare("LayerNormalizationGrad", domain="portable",
        inputs=("dY", "X", "Scale", "d_mean?", "d_inv_std_dev?"), outputs=("dX", "d_scale"),
        infer=_layer_norm_grad_infer, attrs=_LAYER_NORM_ATTRS, inplace=((0, 0),),
        doc="LayerNormalization gradient; d_scale has the normalised shape X.shape[axis:] "
            "(at Scale's rank), not yet summed down to Scale's shape.")

# -- RMSNormalization --------------------------------------------------------------------------


def _rms_norm_infer(ctx):
    _check_normalisation(ctx, (1,))
    return [ctx.type(0)]


def _rms_norm_grad(g, dys):
    """With r = 1 / sqrt(mean(x^2) + eps) and n = x r: d_scale = sum(dy n) and
    dx = r (dn - n mean(dn n)), dn = dy scale (means over the normalised axes)."""
    x, scale = g.inputs
    rank = len(g.shape(x))
    axes = g.const(np.arange(g.attrs["axis"] % rank, rank, dtype=np.int64))

    def mean(value):
        return g.emit("ReduceMean", value, axes, keepdims=1)

    r = g.emit("Reciprocal", g.emit("Sqrt", g.emit(
        "Add", mean(g.emit("Mul", x, x)), g.scalar(g.attrs["epsilon"], x))))
    n = g.emit("Mul", x, r)
    dn = g.emit("Mul", dys[0], scale)
    dx = g.emit("Mul", r, g.emit("Sub", dn, g.emit("Mul", n, mean(g.emit("Mul", dn, n)))))
    return [dx, g.sum_to(g.emit("Mul", dys[0], n), scale)]


declare("RMSNormalization", inputs=("X", "scale"), outputs=("Y",), infer=_rms_norm_infer,
        attrs=_LAYER_NORM_ATTRS, onnx_since=23, grad=_rms_norm_grad)

# -- InstanceNormalization and GroupNormalization -----------------------------------------------
# Both normalise (N, C, D1, ...) over groups of channels and the spatial axes, then apply a
# per-channel scale and bias: InstanceNormalization is the case of one channel per group.


def _check_grouped(ctx, groups: int) -> None:
    require_float(ctx, 0)
    x = ctx.shape(0)
    if len(x) < 3:
        ctx.fail(f"input must be (N, C, D1, ...) with at least one spatial axis, got {x}")
    if groups < 1 or x[1] % groups:
        ctx.fail(f"num_groups={groups} must divide the {x[1]} channels")
    for i in (1, 2):
        if ctx.shape(i) != (x[1],) or ctx.dtype(i) != ctx.dtype(0):
            ctx.fail(f"{ctx.op.input_name(i)} {ctx.type(i)!r} must be one {ctx.dtype(0).name} "
                     f"per channel ({x[1]})")


def _instance_norm_infer(ctx):
    _check_grouped(ctx, ctx.shape(0)[1] if len(ctx.shape(0)) > 1 else 1)
    return [ctx.type(0)]


def _group_norm_infer(ctx):
    _check_grouped(ctx, ctx.attrs["num_groups"])
    if ONNX_DTYPES.get(ctx.attrs["stash_type"], np.dtype(np.int8)).kind != "f":
        ctx.fail(f"stash_type={ctx.attrs['stash_type']} is not a floating-point element type")
    return [ctx.type(0)]


def grouped_norm_grad(g, dys, groups: int):
    """With x viewed as (N, groups, rest), n = (x - mean) r and r = 1 / sqrt(var + eps) over
    rest: dx = r (dn - mean(dn) - n mean(dn n)) with dn = dy scale; d_scale and d_B sum dy n
    and dy over the samples and the spatial axes."""
    x, scale, _ = g.inputs
    dy = dys[0]
    shape = g.shape(x)
    rank = len(shape)
    others = g.const(np.asarray([0] + list(range(2, rank)), np.int64))
    last = g.const(np.asarray([2], np.int64))

    def grouped(value):
        return g.emit("Reshape", value, g.const(np.asarray([shape[0], groups, -1], np.int64)))

    def mean(value):
        return g.emit("ReduceMean", value, last, keepdims=1)

    xg = grouped(x)
    centred = g.emit("Sub", xg, mean(xg))
    r = g.emit("Reciprocal", g.emit("Sqrt", g.emit(
        "Add", mean(g.emit("Mul", centred, centred)), g.scalar(g.attrs["epsilon"], x))))
    n = g.emit("Mul", centred, r)
    channels = g.const(np.asarray([1, shape[1]] + [1] * (rank - 2), np.int64))
    dn = grouped(g.emit("Mul", dy, g.emit("Reshape", scale, channels)))
    inner = g.emit("Sub", g.emit("Sub", dn, mean(dn)), g.emit("Mul", n, mean(g.emit("Mul", dn, n))))
    dx = g.emit("Reshape", g.emit("Mul", r, inner), g.const(np.asarray(shape, np.int64)))
    n_full = g.emit("Reshape", n, g.const(np.asarray(shape, np.int64)))
    return [dx, g.emit("ReduceSum", g.emit("Mul", dy, n_full), others, keepdims=0),
            g.emit("ReduceSum", dy, others, keepdims=0)]


declare("InstanceNormalization", inputs=("input", "scale", "B"), outputs=("output",),
        infer=_instance_norm_infer, attrs={"epsilon": Attr("float", 1e-5)}, onnx_since=22,
        grad=lambda g, dys: grouped_norm_grad(g, dys, g.shape(g.inputs[0])[1]))
declare("GroupNormalization", inputs=("X", "scale", "bias"), outputs=("Y",),
        infer=_group_norm_infer, onnx_since=21,
        attrs={"epsilon": Attr("float", 1e-5), "num_groups": Attr("int"),
               "stash_type": Attr("int", 1)},
        grad=lambda g, dys: grouped_norm_grad(g, dys, g.attrs["num_groups"]))

# -- LRN ---------------------------------------------------------------------------------------


def _lrn_infer(ctx):
    require_float(ctx, 0)
    if len(ctx.shape(0)) < 2:
        ctx.fail("X must have rank >= 2 (N, C, D1, ...)")
    if ctx.attrs["size"] < 1:
        ctx.fail(f"size={ctx.attrs['size']} must be positive")
    return [ctx.type(0)]


def _lrn_grad(g, dys):
    return [g.emit("portable.LRNGrad", dys[0], g.inputs[0], **g.attrs)]


_LRN_ATTRS = {"size": Attr("int"), "alpha": Attr("float", 1e-4), "beta": Attr("float", 0.75),
              "bias": Attr("float", 1.0)}

declare("LRN", inputs=("X",), outputs=("Y",), infer=_lrn_infer, attrs=_LRN_ATTRS, onnx_since=13,
        grad=_lrn_grad, inplace=((0, 0),))
declare("LRNGrad", domain="portable", inputs=("dY", "X"), outputs=("dX",),
        infer=lambda ctx: [ctx.type(1)], attrs=_LRN_ATTRS, inplace=((0, 0),),
        doc="LRN gradient, recomputing the window sums from X.")

# -- Dropout -----------------------------------------------------------------------------------


def _dropout_infer(ctx):
    require_float(ctx, 0)
    if ctx.has(1):
        require_float(ctx, 1)
        if ctx.shape(1) != ():
            ctx.fail(f"ratio must be a scalar, got shape {ctx.shape(1)}")
        if ctx.known(1) and not 0.0 <= float(ctx.value(1)) < 1.0:
            ctx.fail(f"ratio {float(ctx.value(1))} is not in [0, 1)")
    if ctx.has(2) and (ctx.shape(2) != () or ctx.dtype(2) != np.bool_):
        ctx.fail(f"training_mode must be a bool scalar, got {ctx.type(2)!r}")
    return [ctx.type(0), TensorType(ctx.shape(0), np.bool_)]


def _dropout_training_mode(node: Node, training: bool) -> Node:
    # The attribute now decides; the runtime flag input is dropped. Training adds the mask
    # output when absent: the gradient needs it to drop the same elements.
    outputs = node.outputs
    if training and (len(outputs) < 2 or not outputs[1]):
        outputs = (outputs[0], f"{node.name}/mask")
    return node.replace(inputs=node.inputs[:2], outputs=outputs,
                        attrs={**node.attrs, "training_mode": int(training)})


def _static_training(g) -> bool | None:
    """Whether the Dropout node trains: True/False when known while planning, else None."""
    if g.attrs["training_mode"]:
        return True
    flag = _optional(g.inputs, 2)
    if flag is None:
        return False
    try:
        return bool(g.value(flag))
    except PortableError:  # a runtime flag: its value is not a constant
        return None


def _dropout_grad(g, dys):
    dy = dys[0]
    mask = _optional(g.outputs, 1)
    if mask is not None:
        return [g.emit("portable.DropoutGrad", dy, mask, *g.inputs[1:3],
                       training_mode=g.attrs["training_mode"])]
    if _static_training(g) is False:
        return [dy]
    raise NotDifferentiableError(
        f"node {g.node.name!r} (op Dropout) may run in training mode but has no mask output, "
        f"which its gradient needs; switch the graph with its training_mode facet "
        f"(portable.passes.training), which adds the mask")


declare("Dropout", inputs=("data", "ratio?", "training_mode?"), outputs=("output", "mask?"),
        infer=_dropout_infer, attrs={"seed": Attr("int", None), "training_mode": Attr("int", 0)},
        onnx_since=22, grad=_dropout_grad, inplace=((0, 0),), nondiff_inputs=(1, 2),
        random=True, training_mode=_dropout_training_mode, dtype_rule=dtypes_of("data", np.bool_))


def _dropout_grad_infer(ctx):
    if ctx.shape(1) != ctx.shape(0) or ctx.dtype(1) != np.bool_:
        ctx.fail("mask must be a bool tensor of dY's shape")
    return [ctx.type(0)]


declare("DropoutGrad", domain="portable", inputs=("dY", "mask", "ratio?", "training_mode?"),
        outputs=("dX",), infer=_dropout_grad_infer, attrs={"training_mode": Attr("int", 0)},
        inplace=((0, 0),), dtype_rule=dtypes_of("data", inputs=(0,)),
        doc="dX = dY * mask / (1 - ratio) in training mode, else dY.")

# -- Softmax and LogSoftmax --------------------------------------------------------------------


def _softmax_infer(ctx):
    require_float(ctx, 0)
    normalize_axis(ctx, ctx.attrs["axis"], len(ctx.shape(0)))
    return same_as_input(ctx)


def _axis_const(g):
    rank = len(g.shape(g.inputs[0]))
    return g.const(_int64([g.attrs["axis"] % max(rank, 1)]))


def _softmax_grad(g, dys):
    # dx = y * (dy - sum(dy * y))
    y, dy = g.outputs[0], dys[0]
    dot = g.emit("ReduceSum", g.emit("Mul", dy, y), _axis_const(g), keepdims=1)
    return [g.emit("Mul", y, g.emit("Sub", dy, dot))]


def _log_softmax_grad(g, dys):
    # dx = dy - softmax * sum(dy), softmax = exp(y)
    y, dy = g.outputs[0], dys[0]
    total = g.emit("ReduceSum", dy, _axis_const(g), keepdims=1)
    return [g.emit("Sub", dy, g.emit("Mul", g.emit("Exp", y), total))]


_SOFTMAX = dict(inputs=("input",), outputs=("output",), infer=_softmax_infer,
                attrs={"axis": Attr("int", -1)}, onnx_since=13, inplace=((0, 0),))
declare("Softmax", grad=_softmax_grad, **_SOFTMAX)
declare("LogSoftmax", grad=_log_softmax_grad, **_SOFTMAX)
