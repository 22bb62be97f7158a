"""Decompositions for export: ops with no ONNX form at the target opset, written as ONNX ops.

A decomposition is ``fn(g) -> [output handle or None per output]``, written against the same
``GradContext`` interface that gradient rules use (``g.emit``, ``g.const``, ``g.shape``...), so
it reads like one and could move into the op declaration as a facet. ``g.emit_onnx`` (export
only) writes an ONNX op that portable does not implement, typed like one of its inputs.

Two kinds of op need one:

- private ops (domain ``portable``: gradients, and the fused ops the optimisation passes
  create: FusedElementwise, FusedConv, FusedGemm), which ONNX never has;
- ONNX ops that the target opset predates (Gelu before 20, LayerNormalization before 17,
  HardSwish before 14).

The exporter emits the nodes in canonical form and then writes each at the target version, so a
decomposition may use any public op (ReduceMean with ``axes`` as an input, say).

Example:
    >>> DECOMPOSITIONS["Gelu"]  # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from portable.errors import OpError
from portable.ops.gradients import GradContext, Handle
from portable.ops.movement import slice_bounds, slice_length
from portable.ops.mxnet_outputs import softmax_view

Decomposition = Callable[[GradContext], list]


def _scaled(g: GradContext, x: Handle, factor: float) -> Handle:
    return g.emit("Mul", x, g.scalar(factor, x))


def _gelu(g: GradContext) -> list:
    (x,) = g.inputs
    half_x = _scaled(g, x, 0.5)
    if g.attrs["approximate"] == "tanh":
        cube = g.emit("Mul", g.emit("Mul", x, x), x)
        inner = _scaled(g, g.emit("Add", x, _scaled(g, cube, 0.044715)), math.sqrt(2 / math.pi))
        core = g.emit("Tanh", inner)
    else:
        core = g.emit("Erf", _scaled(g, x, math.sqrt(0.5)))
    return [g.emit("Mul", half_x, g.emit("Add", core, g.scalar(1.0, x)))]


def _hard_swish(g: GradContext) -> list:
    (x,) = g.inputs
    return [g.emit("Mul", x, g.emit("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5))]


def _layer_normalization(g: GradContext) -> list:
    x, scale = g.inputs[:2]
    bias = g.inputs[2] if len(g.inputs) > 2 else None
    rank = len(g.shape(x))
    axis = g.attrs["axis"] % rank
    axes = g.const(np.arange(axis, rank, dtype=np.int64))
    mean = g.emit("ReduceMean", x, axes, keepdims=1)
    centered = g.emit("Sub", x, mean)
    variance = g.emit("ReduceMean", g.emit("Mul", centered, centered), axes, keepdims=1)
    inv_std = g.emit("Reciprocal", g.emit("Sqrt", g.emit(
        "Add", variance, g.scalar(g.attrs["epsilon"], variance))))
    y = g.emit("Mul", g.emit("Mul", centered, inv_std), scale)
    if bias is not None:
        y = g.emit("Add", y, bias)
    return [y, mean, inv_std]


def _dropout_grad(g: GradContext) -> list:
    dy, mask = g.inputs[:2]
    ratio = g.inputs[2] if len(g.inputs) > 2 else None
    if not g.attrs["training_mode"]:
        return [g.emit("Identity", dy)]
    kept = g.emit("Mul", dy, g.emit("Cast", mask, to=_onnx_type(g, dy)))
    if ratio is None:
        return [_scaled(g, kept, 2.0)]  # ONNX's default ratio 0.5
    ratio = g.emit("Cast", ratio, to=_onnx_type(g, dy)) if g.dtype(ratio) != g.dtype(dy) \
        else ratio
    return [g.emit("Div", kept, g.emit("Sub", g.scalar(1.0, dy), ratio))]


def _onnx_type(g: GradContext, like: Handle) -> int:
    from portable.dtypes import to_onnx

    return to_onnx(g.dtype(like))


def _gather_grad(g: GradContext) -> list:
    """Zeros of ``shape`` with dy added at Gather's indices: a ScatterND with reduction add on
    the gathered axis moved to the front."""
    dy, indices = g.inputs
    shape = [int(d) for d in g.attrs["shape"]]
    axis = g.attrs["axis"] % len(shape)
    index_rank = len(g.shape(indices))
    perm = [axis] + [a for a in range(len(shape)) if a != axis]
    zeros = g.emit("ConstantOfShape", g.const(np.asarray([shape[a] for a in perm], np.int64)),
                   value=np.zeros(1, g.dtype(dy)))
    # dy is shape[:axis] + indices.shape + shape[axis+1:]: bring the index axes to the front.
    dy_perm = list(range(axis, axis + index_rank)) + list(range(axis)) + \
        list(range(axis + index_rank, len(g.shape(dy))))
    updates = g.emit("Transpose", dy, perm=dy_perm) if dy_perm != sorted(dy_perm) else dy
    where = g.emit("Unsqueeze", g.emit("Cast", indices, to=7), g.const(np.asarray([-1],
                                                                                    np.int64)))
    # ScatterND is not one of portable's ops: written as is, typed like ``zeros``.
    scattered = g.emit_onnx("ScatterND", zeros, where, updates, like=zeros, since=16,
                            reduction="add")
    inverse = [int(i) for i in np.argsort(perm)]
    return [g.emit("Transpose", scattered, perm=inverse) if perm != sorted(perm) else scattered]


def _slice_grad(g: GradContext) -> list:
    """Unit steps: dy padded with zeros back to the input's shape."""
    dy = g.inputs[0]
    shape = [int(d) for d in g.attrs["shape"]]
    given = [None if h is None else g.value(h) for h in g.inputs[1:]] + [None] * 4
    bounds = slice_bounds(shape, *given[:4])
    if any(step != 1 for _, _, step in bounds):
        raise OpError(f"node {g.node.name!r} (op {g.node.op}): only unit-step slices have a "
                      f"decomposition into ONNX ops")
    before = [start for start, _, _ in bounds]
    after = [d - b[0] - slice_length(*b) for d, b in zip(shape, bounds)]
    return [g.emit("Pad", dy, g.const(np.asarray(before + after, np.int64)))]


def _fused_elementwise(g: GradContext) -> list:
    """The chain, one op per step (see ``portable/ops/fused.py``)."""
    from portable.ops.fused import parse_body

    previous = None
    for op, refs, attrs in parse_body(g.attrs["body"]):
        previous = g.emit(op, *(previous if ref == -1 else g.inputs[ref] for ref in refs),
                          **dict(attrs))
    return [previous]


def _fused_with_activation(base: str) -> Decomposition:
    """FusedConv / FusedGemm: the base op, FusedConv's residual ``Z`` added, then the
    activation with its constant operands (Clip's ``min``/``max``) as constant inputs again."""
    def rule(g: GradContext) -> list:
        from portable.ops import registry
        from portable.ops.fused import activation_parts, operand_arrays, split_attrs

        op = registry.get(base)
        own, activation, _ = split_attrs(op, dict(g.node.attrs))
        arity = len(op.inputs)
        y = g.emit(base, *g.inputs[:arity], **own)
        if len(g.inputs) > arity and g.inputs[arity] is not None:
            y = g.emit("Add", y, g.inputs[arity])
        if not activation:
            return [y]
        attrs, operands = activation_parts(activation, g.attrs["activation_attrs"])
        extra = [None if a is None else g.const(a) for a in operand_arrays(operands, g.dtype(y))]
        return [g.emit(activation, y, *extra, **attrs)]
    return rule


def _softmax_output(g: GradContext) -> list:
    """MXNet's SoftmaxOutput at inference: the softmax alone, along axis 1 of the view MXNet
    computes it in (the label only matters to its gradient)."""
    x = g.inputs[0]
    shape = tuple(g.shape(x))
    view = softmax_view(shape, bool(g.attrs["multi_output"]), bool(g.attrs["preserve_shape"]))
    if view == shape:
        return [g.emit("Softmax", x, axis=1)]
    flat = g.emit("Reshape", x, g.const(np.asarray(view, np.int64)))
    return [g.emit("Reshape", g.emit("Softmax", flat, axis=1),
                   g.const(np.asarray(shape, np.int64)))]


def _forward_only(op: str | None) -> Decomposition:
    """MXNet's regression outputs at inference: their prediction (the label only matters to
    their gradient)."""
    def rule(g: GradContext) -> list:
        return [g.emit(op, g.inputs[0]) if op else g.emit("Identity", g.inputs[0])]
    return rule


DECOMPOSITIONS: dict[str, Decomposition] = {
    "portable.SoftmaxOutput": _softmax_output,
    "portable.LinearRegressionOutput": _forward_only(None),
    "portable.MAERegressionOutput": _forward_only(None),
    "portable.LogisticRegressionOutput": _forward_only("Sigmoid"),
    "portable.FusedElementwise": _fused_elementwise,
    "portable.FusedConv": _fused_with_activation("Conv"),
    "portable.FusedGemm": _fused_with_activation("Gemm"),
    "Gelu": _gelu,
    "HardSwish": _hard_swish,
    "LayerNormalization": _layer_normalization,
    "portable.DropoutGrad": _dropout_grad,
    "portable.GatherGrad": _gather_grad,
    "portable.SliceGrad": _slice_grad,
}
