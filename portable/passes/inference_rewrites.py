"""Inference rewrites, as pattern -> replacement rules run by ``portable.passes.rewriter``.

- ``ELIMINATE_NOOPS``: Identity, and Dropout in inference mode, pass their input through: their
  readers read the input instead.
- ``FOLD_INTO_CONV``: an inference-mode BatchNormalization, or a Mul or Add by a per-channel
  constant, after a Conv with constant weights is folded into the Conv's weights and bias.
- ``BATCH_NORM_AS_AFFINE``: an inference-mode BatchNormalization left over (not after a Conv:
  DenseNet's and pre-activation ResNets' BatchNormalization -> Relu before each Conv) becomes
  a Mul and an Add by per-channel constants, which the elementwise fusion then runs in one
  pass together with the Mul, Add and activation that follow it.
- ``FUSE_ACTIVATIONS``: Conv or Gemm followed by an activation (an elementwise op that may run
  in place on its input, whose other inputs are absent or constant scalars in optional slots:
  Clip(0, 6), MobileNet's ReLU6) becomes ``portable.FusedConv`` / ``portable.FusedGemm``;
  ``Add(Conv(x), Z)`` with Z of the Conv output's shape and dtype (a residual) becomes a
  FusedConv that reads Z, and an activation after it joins it (ResNet's Conv -> Add -> Relu).
- ``SELECT_FUSED_CONV``: every remaining Conv runs as ``portable.FusedConv`` too, whose kernels
  declare their workspace so that the memory plan accounts for it.

Every rule checks the training mode of the nodes it folds, so training graphs are left alone.

Example:
    >>> graph = rewrite(graph, FOLD_INTO_CONV)  # doctest: +SKIP
"""
from __future__ import annotations

import json

import numpy as np

from portable.ir.graph import Node
from portable.ops import registry
from portable.ops.fused import operand_slots
from portable.passes.rewriter import Match, Pattern, Rewrite, Rule

# -- eliminate no-ops -----------------------------------------------------------------------


def _pass_through(m: Match) -> Rewrite | None:
    node = m["node"]
    if any(out and m.readers(out) for out in node.outputs[1:]):
        return None  # Dropout's mask is read
    return Rewrite(renames={node.outputs[0]: node.inputs[0]})


def _dropout(m: Match) -> Rewrite | None:
    node = m["node"]
    if len(node.inputs) > 2 and node.inputs[2]:
        flag = m.const(node.inputs[2])
        if flag is None or bool(flag):
            return None
    return _pass_through(m)


ELIMINATE_NOOPS = (
    Rule("eliminate-identity", Pattern("Identity", name="node"), _pass_through),
    Rule("eliminate-inference-dropout",
         Pattern(lambda n: n.op == "Dropout" and not n.attrs.get("training_mode", 0),
                 name="node"), _dropout),
)



def _sum_as_add(m: Match) -> Rewrite:
    node = m["sum"]
    return Rewrite([Node("Add", tuple(node.inputs), tuple(node.outputs), {}, node.name)])


# A Sum of two inputs is an Add (the same broadcasting, the same one rounding): the folds and
# fusions below, which know Add, then see the residual Sums of ResNets exported at opset 6.
SUM_OF_TWO_AS_ADD = (
    Rule("sum-of-two-as-add",
         Pattern(lambda n: n.op == "Sum" and len(n.inputs) == 2 and all(n.inputs), name="sum"),
         _sum_as_add),
)

# -- fold BatchNormalization, Mul and Add into Conv ------------------------------------------


def _conv_weights(m: Match, conv: Node):
    """The Conv's constant weight and bias (zeros when absent), or None."""
    w = m.const(conv.inputs[1])
    if w is None:
        return None
    b = m.const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
    if len(conv.inputs) > 2 and conv.inputs[2] and b is None:
        return None
    return w, (np.zeros(w.shape[0], w.dtype) if b is None else b)


def _new_conv(m: Match, conv: Node, output: str, w: np.ndarray, b: np.ndarray) -> Rewrite:
    w_name, b_name = m.fresh(f"{conv.name}/W"), m.fresh(f"{conv.name}/B")
    dtype = m.type(conv.inputs[1]).dtype
    node = Node("Conv", (conv.inputs[0], w_name, b_name), (output,), dict(conv.attrs),
                conv.name)
    # copy=False: a weight that only changes name (an Add folded into the bias) is not copied
    return Rewrite([node], {w_name: w.astype(dtype, copy=False), b_name: b.astype(dtype)})


def _scaled(w: np.ndarray, k: np.ndarray) -> np.ndarray:
    # The per-channel factor is computed in float64 and rounded once; the product is made in
    # the weight's own type, so folding never holds a float64 copy of a large weight.
    return w * k.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 1))


def _fold_batch_norm(m: Match) -> Rewrite | None:
    bn, conv = m["bn"], m["conv"]
    if bn.attrs.get("training_mode", 0) or any(o and m.readers(o) for o in bn.outputs[1:]):
        return None
    params = [m.const(name) for name in bn.inputs[1:5]]
    weights = _conv_weights(m, conv)
    if weights is None or any(p is None for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    epsilon = registry.get("BatchNormalization").resolve_attrs(bn)["epsilon"]
    k = scale / np.sqrt(var + epsilon)
    w, b = weights
    return _new_conv(m, conv, bn.outputs[0], _scaled(w, k), (b - mean) * k + bias)


def _per_channel(m: Match, conv: Node, value: str) -> np.ndarray | None:
    """A constant that broadcasts against the Conv output along its channel axis only, as a
    (channels,) vector; else None."""
    c = m.const(value)
    out = m.type(conv.outputs[0]).shape
    if c is None or c.ndim > len(out) or c.dtype != m.type(conv.outputs[0]).dtype:
        return None
    shape = (1,) * (len(out) - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if shape[1] not in (1, out[1]):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (out[1],))


def _fold_affine(combine):
    def replace(m: Match) -> Rewrite | None:
        node, conv = m["node"], m["conv"]
        other = node.inputs[1] if node.inputs[0] == conv.outputs[0] else node.inputs[0]
        c = _per_channel(m, conv, other)
        weights = _conv_weights(m, conv)
        if c is None or weights is None:
            return None
        w, b = combine(*weights, c)
        return _new_conv(m, conv, node.outputs[0], w, b)
    return replace


def _mul(w, b, c):
    return _scaled(w, c), b * c


def _add(w, b, c):
    return w, b + c


def _conv_then(op: str) -> tuple[Rule, ...]:
    """Rules for ``op(Conv(...), c)`` and ``op(c, Conv(...))``."""
    replace = _fold_affine(_mul if op == "Mul" else _add)
    conv = Pattern("Conv", name="conv")
    return (Rule(f"fold-{op.lower()}-into-conv", Pattern(op, conv, None, name="node"), replace),
            Rule(f"fold-{op.lower()}-into-conv", Pattern(op, None, conv, name="node"), replace))


FOLD_INTO_CONV = (
    Rule("fold-batch-norm-into-conv",
         Pattern("BatchNormalization", Pattern("Conv", name="conv"), name="bn"),
         _fold_batch_norm),
    *_conv_then("Mul"),
    *_conv_then("Add"),
)

def _batch_norm_as_affine(m: Match) -> Rewrite | None:
    """BN(x) = x * k + (bias - mean * k), k = scale / sqrt(var + epsilon): the BatchNormalization
    kernel's own inference formula, computed here in the same dtype (float32 or float64 only,
    where its statistics type is the input's), so the Mul and Add give the kernel's results
    bit for bit."""
    bn = m["bn"]
    x = m.type(bn.inputs[0])
    if (bn.attrs.get("training_mode", 0) or any(o and m.readers(o) for o in bn.outputs[1:])
            or x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or len(x.shape) < 2):
        return None
    params = [m.const(name) for name in bn.inputs[1:5]]
    if any(p is None or p.dtype != x.dtype or p.ndim != 1 for p in params):
        return None
    scale, bias, mean, var = params
    epsilon = registry.get("BatchNormalization").resolve_attrs(bn)["epsilon"]
    k = scale / np.sqrt(var + epsilon)
    shape = (-1,) + (1,) * (len(x.shape) - 2)  # (broadcasts along the channel axis)
    k_name, shift_name = m.fresh(f"{bn.name}/scale"), m.fresh(f"{bn.name}/shift")
    scaled = m.fresh(f"{bn.name}/scaled")
    nodes = [Node("Mul", (bn.inputs[0], k_name), (scaled,), {}, f"{bn.name}/mul"),
             Node("Add", (scaled, shift_name), (bn.outputs[0],), {}, f"{bn.name}/add")]
    return Rewrite(nodes, {k_name: k.reshape(shape), shift_name: (bias - mean * k).reshape(shape)})


BATCH_NORM_AS_AFFINE = (
    Rule("batch-norm-as-affine", Pattern("BatchNormalization", name="bn"),
         _batch_norm_as_affine),
)

# -- fuse activations into Conv and Gemm -----------------------------------------------------


def is_activation(node: Node) -> bool:
    """An elementwise op that may run in place on its first input, whose other inputs (if
    any) fill optional slots: a fusable activation once those are constant scalars."""
    op = registry.get(node.op, node=node)
    return (op.fusion == "elementwise" and (0, 0) in op.inplace
            and bool(node.inputs) and bool(node.inputs[0]) and len(node.outputs) == 1
            and all(not name or op.input_name(i) in operand_slots(op)
                    for i, name in enumerate(node.inputs[1:], 1))
            and not any(isinstance(v, np.ndarray) for v in node.attrs.values()))


def _activation_attrs(m: Match, act: Node) -> str | None:
    """The activation's attributes as the fused node carries them (JSON): its own, and each
    constant scalar operand under its input's name (Clip's ``min``/``max``); None when an
    operand is not a constant scalar of the activation's type."""
    op = registry.get(act.op, node=act)
    attrs = dict(act.attrs)
    dtype = m.type(act.outputs[0]).dtype
    for index, name in enumerate(act.inputs[1:], 1):
        if not name:
            continue
        value = m.const(name)
        if value is None or value.size != 1 or value.dtype != dtype:
            return None  # a bound known only at run time stays a separate Clip
        attrs[op.input_name(index)] = value.reshape(()).item()
    try:
        return json.dumps(attrs, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _fuse_activation(fused: str):
    def replace(m: Match) -> Rewrite | None:
        act, base = m["act"], m["base"]
        if m.type(act.outputs[0]) != m.type(base.outputs[0]):
            return None
        act_attrs = _activation_attrs(m, act)
        if act_attrs is None:
            return None
        node = Node(fused, base.inputs, act.outputs,
                    {**base.attrs, "activation": act.op, "activation_attrs": act_attrs},
                    f"{base.name}+{act.op}")
        return Rewrite([node])
    return replace


def _without_epilogue(node: Node) -> bool:
    """A Conv, or a FusedConv with neither an activation nor a residual yet: what a residual
    Add, or an activation after that Add, may still join."""
    if node.op == "Conv":
        return True
    return (node.op == "portable.FusedConv" and not node.attrs.get("activation")
            and len(node.inputs) <= 3)


def _with_residual_only(node: Node) -> bool:
    """A FusedConv that adds a residual and has no activation yet."""
    return (node.op == "portable.FusedConv" and not node.attrs.get("activation")
            and len(node.inputs) > 3 and bool(node.inputs[3]))


def _fuse_residual(m: Match) -> Rewrite | None:
    add, base = m["add"], m["base"]
    z = add.inputs[1] if add.inputs[0] == base.outputs[0] else add.inputs[0]
    y = m.type(base.outputs[0])
    if not z or z == base.outputs[0] or m.type(z) != y or m.type(add.outputs[0]) != y:
        return None  # a broadcast Z would need the Add's own kernel
    if m.const(z) is not None and _per_channel(m, base, z) is not None:
        return None  # a per-channel constant belongs in the bias (FOLD_INTO_CONV)
    inputs = tuple(base.inputs[:3]) + ("",) * (3 - len(base.inputs)) + (z,)
    attrs = {k: v for k, v in base.attrs.items() if k not in ("activation", "activation_attrs")}
    return Rewrite([Node("portable.FusedConv", inputs, add.outputs, attrs, f"{base.name}+Add")])


def _residual_rules() -> tuple[Rule, ...]:
    conv = Pattern(_without_epilogue, name="base")
    return (Rule("fuse-conv-residual", Pattern("Add", conv, None, name="add"), _fuse_residual),
            Rule("fuse-conv-residual", Pattern("Add", None, conv, name="add"), _fuse_residual))


FUSE_ACTIVATIONS = (
    Rule("fuse-conv-activation", Pattern(is_activation, Pattern("Conv", name="base"), name="act"),
         _fuse_activation("portable.FusedConv")),
    Rule("fuse-gemm-activation", Pattern(is_activation, Pattern("Gemm", name="base"), name="act"),
         _fuse_activation("portable.FusedGemm")),
    *_residual_rules(),
    # The residual Add is matched at its own node, before the activation that follows it is
    # visited, so the activation joins the FusedConv in the next sweep.
    Rule("fuse-residual-activation",
         Pattern(is_activation, Pattern(_with_residual_only, name="base"), name="act"),
         _fuse_activation("portable.FusedConv")),
)


def _select_fused_conv(m: Match) -> Rewrite:
    conv = m["conv"]
    return Rewrite([Node("portable.FusedConv", conv.inputs, conv.outputs, dict(conv.attrs),
                         conv.name)])


SELECT_FUSED_CONV = (Rule("select-fused-conv", Pattern("Conv", name="conv"),
                          _select_fused_conv),)
