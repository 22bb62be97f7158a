"""Private fused ops that the optimisation passes create (never exported as such).

- ``portable.FusedElementwise``: a chain of elementwise ops evaluated into one output buffer.
  Its ``body`` attribute holds the chain as JSON, one step per op:
  ``[{"op": "Mul", "inputs": [0, 1], "attrs": {}}, {"op": "Relu", "inputs": [-1]}]``; an
  input ``i >= 0`` is the fused node's input ``i``, ``-1`` the previous step's output. Every
  step has the output's type, and every step after the first reads the previous one through an
  input that its op may overwrite in place, so a kernel can run the chain inside the output.
- ``portable.FusedConv`` and ``portable.FusedGemm``: Conv (with bias) or Gemm followed by an
  activation run in place on the result. ``activation`` names an elementwise op that declares
  the in-place pair (0, 0) (``""``: none) and ``activation_attrs`` holds its attributes as
  JSON, together with its constant scalar operands keyed by the names of the optional inputs
  they fill: Clip(0, 6) is ``{"min": 0.0, "max": 6.0}``, as opset 6's Clip attributes were.
  A FusedConv's optional fourth input ``Z`` (the Conv output's shape and dtype, a residual)
  is added before the activation: ``Y = act(Conv(X, W, B) + Z)``, onnxruntime's FusedConv.
  The kernel writes the Conv into ``Y`` before it reads ``Z``, so ``Y`` must not share
  ``Z``'s storage: the op declares no in-place pair.

Type rules delegate to the declarations of the ops they combine, so there is one rule per op.
"""
from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np

from portable.backend import PreparedKernel, bound_kernel
from portable.errors import OpAttributeError
from portable.ir.graph import Node, TensorType
from portable.ops.registry import (Attr, DtypeContext, InferContext, OpDef, declare, get,
                                   infer_dtypes)


@functools.lru_cache(maxsize=1024)
def parse_body(body: str) -> tuple[tuple[str, tuple[int, ...], tuple[tuple[str, Any], ...]], ...]:
    """The steps of a FusedElementwise body: ``(op, input refs, attrs items)`` each."""
    steps = []
    for step in json.loads(body):
        steps.append((step["op"], tuple(int(i) for i in step["inputs"]),
                      tuple(sorted(step.get("attrs", {}).items()))))
    return tuple(steps)


def encode_body(steps: list[tuple[str, list[int], dict]]) -> str:
    """JSON for a FusedElementwise body (the inverse of ``parse_body``)."""
    return json.dumps([{"op": op, "inputs": list(refs), "attrs": dict(attrs)}
                       for op, refs, attrs in steps], sort_keys=True, separators=(",", ":"))


def step_node(op: str, inputs: tuple[str, ...], attrs: dict, name: str) -> Node:
    return Node(op, inputs, ("",), attrs, name)


def _fused_elementwise_infer(ctx: InferContext):
    steps = parse_body(ctx.attrs["body"])
    if not steps:
        ctx.fail("body has no steps")
    previous = None
    for index, (op_name, refs, attrs) in enumerate(steps):
        op = get(op_name, node=ctx.node)
        types, values = [], []
        for ref in refs:
            if ref == -1:
                if previous is None:
                    ctx.fail(f"step {index} ({op_name}) reads the previous step, but it is first")
                types.append(previous)
                values.append(None)
            else:
                types.append(ctx.type(ref))
                values.append(ctx.values[ref] if ref < len(ctx.values) else None)
        node = step_node(op_name, tuple(f"{ctx.node.name}/{index}.{i}" for i in range(len(refs))),
                         dict(attrs), f"{ctx.node.name}/{op_name}{index}")
        result = op.infer(InferContext(node, op, types, values))[0]
        if previous is not None and result != previous:
            ctx.fail(f"step {index} ({op_name}) gives {result!r}, not the chain's type "
                     f"{previous!r}: every step must keep one type")
        previous = result
    return [previous]


def _fused_elementwise_dtype(ctx: DtypeContext):
    """The steps' own dtype rules in order; every step keeps the chain's one dtype."""
    previous = None
    for index, (op_name, refs, attrs) in enumerate(parse_body(ctx.attrs["body"])):
        op = get(op_name, node=ctx.node)
        node = step_node(op_name, tuple(f"{ctx.node.name}/{index}.{i}" for i in range(len(refs))),
                         dict(attrs), f"{ctx.node.name}/{op_name}{index}")
        step = DtypeContext(node, op, [previous if r == -1 else ctx.inputs[r] for r in refs],
                            [None])
        previous = infer_dtypes(op, step)[0]
        for r, dtype in zip(refs, step.inputs):  # a step may type an input not known yet
            if r >= 0 and ctx.inputs[r] is None:
                ctx.inputs[r] = dtype
    return [previous]


declare("FusedElementwise", domain="portable", inputs=("inputs*",), outputs=("Y",),
        infer=_fused_elementwise_infer, attrs={"body": Attr("string")}, inplace=((0, 0),),
        dtype_rule=_fused_elementwise_dtype,
        doc="A chain of elementwise ops evaluated into the output buffer.")


def split_attrs(base: OpDef, attrs: dict) -> tuple[dict, str, dict]:
    """A fused node's attributes as (the base op's, activation op name, activation's)."""
    own = {k: v for k, v in attrs.items() if k in base.attrs}
    return own, attrs.get("activation") or "", json.loads(attrs.get("activation_attrs") or "{}")


def operand_slots(op: OpDef) -> dict[str, int]:
    """The optional inputs (after the first) that a fused activation may carry as constant
    scalars in its attributes, by name -> input index (Clip: ``min`` 1, ``max`` 2)."""
    return {op.input_name(i): i for i, spec in enumerate(op.inputs)
            if i and spec.endswith("?") and op.input_name(i) not in op.attrs}


@functools.lru_cache(maxsize=256)
def activation_parts(name: str, attrs_json: str) -> tuple[dict, tuple[tuple[int, Any], ...]]:
    """A fused activation's resolved attributes and its constant operands as ``(input index,
    scalar)`` pairs, from the fused node's ``activation_attrs`` JSON.

    Raises:
        OpAttributeError: a key that is neither an attribute nor an optional input of the op.
    """
    op = get(name)
    items = json.loads(attrs_json or "{}")
    slots = operand_slots(op)
    attrs = {k: v for k, v in items.items() if k not in slots}
    operands = tuple(sorted((slots[k], v) for k, v in items.items() if k in slots))
    try:
        resolved = op.resolve_attrs(Node(name, ("x",), ("y",), attrs, f"fused/{name}"))
    except OpAttributeError as exc:
        raise OpAttributeError(f"{exc}; a fused {name} also takes its optional inputs "
                               f"{sorted(slots) or 'none'} as constants") from exc
    return resolved, operands


# The activations whose effect is a pair of bounds: the op's name -> (low, high) before its
# operands (Clip's min and max, inputs 1 and 2) are applied.
BOUNDED_ACTIVATIONS = {"": (-math.inf, math.inf), "Relu": (0.0, math.inf),
                       "Clip": (-math.inf, math.inf)}


def activation_bounds(attrs: dict) -> tuple[float, float] | None:
    """(low, high) that a fused node's activation holds its result in, or None when the
    activation is not a pair of bounds or a bound is NaN (np.clip then gives NaN
    everywhere, which a kernel's comparisons would not)."""
    activation = attrs.get("activation") or ""
    if activation not in BOUNDED_ACTIVATIONS:
        return None
    low, high = BOUNDED_ACTIVATIONS[activation]
    if activation == "Clip":
        _, operands = activation_parts(activation, attrs.get("activation_attrs") or "{}")
        given = dict(operands)
        low, high = float(given.get(1, low)), float(given.get(2, high))
    if math.isnan(low) or math.isnan(high):
        return None
    return low, high


def operand_arrays(operands: tuple[tuple[int, Any], ...], dtype) -> list:
    """The activation's inputs after the first, as 0-d NumPy arrays of ``dtype`` (None where
    absent), in input order."""
    arrays: list = [None] * max((i for i, _ in operands), default=0)
    for index, value in operands:
        arrays[index - 1] = np.asarray(value, dtype=dtype)
    return arrays


class ComposedKernel(PreparedKernel):
    """A prepared kernel whose bound form calls its parts directly (``bind``): where a step
    has nothing to add (no residual, no absent trailing input), the base kernel's own bound
    call, else a closure over the bound parts, instead of the general ``run`` that unpacks
    its state and slices its inputs at every call (about 1 us per op on a small Conv chain)."""

    def bind(self, backend, input_types: list, output_types: list, attrs: dict):
        state = self.prepare(backend, input_types, output_types, attrs)
        return _direct(state, len(input_types)) or functools.partial(self.run, state)


def _direct(state, given: int):
    """The bound call of a composed step without its general ``run``, or None where a form
    below does not fit (a residual, or an absent bias the base kernel must not see)."""
    count, first, own, residual, then, act_attrs, extra = state
    if residual is not None or count != given:
        return None
    if then is None:
        # The base kernel receives the fused step's attributes: its own ones plus the
        # activation's two keys, which a kernel of the base op never reads.
        return first
    if not extra:
        def conv_then_activation(ctx, inputs, outputs, attrs):
            first(ctx, inputs, outputs, own)
            then(ctx, outputs, outputs, act_attrs)  # (one output: in place on Y)
        return conv_then_activation
    return None


def composed_kernel(base_name: str) -> PreparedKernel:
    """A FusedConv/FusedGemm kernel for any backend: the backend's own kernel of the base op,
    then its Add of the residual ``Z`` (FusedConv's fourth input) and its activation kernel,
    both in place on the output (a backend with a truly fused kernel registers that instead).
    Every kernel is looked up and prepared once per plan step, and the activation's constant
    operands (Clip's bounds) become backend arrays then, not at every run; bound, the step
    calls those parts directly (``ComposedKernel``)."""
    base = get(base_name)
    arity = len(base.inputs)

    def prepare(backend, input_types, output_types, attrs):
        own, activation, _ = split_attrs(base, attrs)
        count = min(len(input_types), arity)
        while count and input_types[count - 1] is None:
            count -= 1  # an absent bias is no input at all to the base kernel
        first = bound_kernel(backend.kernel(base_name), backend, input_types[:count],
                             output_types, own)
        out = output_types[:1]
        residual = None
        if len(input_types) > arity and input_types[arity] is not None:
            residual = bound_kernel(backend.kernel("Add"), backend, out + input_types[arity:],
                                    out, {})
        then = act_attrs = None
        extra: list = []
        if activation:
            act_attrs, operands = activation_parts(activation, attrs["activation_attrs"])
            extra = [None if a is None else backend.from_numpy(a)
                     for a in operand_arrays(operands, out[0].dtype)]
            then = bound_kernel(backend.kernel(activation), backend,
                                out + [None if a is None else TensorType((), out[0].dtype)
                                       for a in extra], out, act_attrs)
        return count, first, own, residual, then, act_attrs, extra

    def run(state, ctx, inputs, outputs, attrs):
        count, first, own, residual, then, act_attrs, extra = state
        first(ctx, inputs[:count], outputs, own)
        if residual is not None:
            residual(ctx, [outputs[0], inputs[arity]], outputs[:1], {})
        if then is not None:
            then(ctx, [outputs[0], *extra], outputs[:1], act_attrs)
    run.__name__ = f"fused_{base_name.lower()}"
    return ComposedKernel(run, prepare)


def _activation_types(ctx, activation: str, act_attrs: dict, y: TensorType):
    """The activation's node and input types inside a fused node: ``y``, then 0-d tensors of
    its type for the constant operands."""
    attrs, operands = activation_parts(activation, json.dumps(act_attrs, sort_keys=True))
    names, types = ["x"], [y]
    for index, _ in operands:
        names += [""] * (index - len(names)) + [f"{ctx.node.name}/act.{index}"]
        types += [None] * (index - len(types)) + [TensorType((), y.dtype)]
    node = Node(activation, tuple(names), ("y",),
                {k: v for k, v in act_attrs.items() if k in get(activation).attrs},
                f"{ctx.node.name}/act")
    return node, types


def _base_node(ctx, base: OpDef, base_name: str, own: dict) -> tuple[Node, int]:
    """The base op's node inside a fused one (without the residual), and FusedConv's residual
    input index (None: no residual)."""
    arity = len(base.inputs)
    inputs = tuple(ctx.node.inputs[:arity])
    residual = arity if len(ctx.node.inputs) > arity and ctx.node.inputs[arity] else None
    return Node(base_name, inputs, ctx.node.outputs, own, ctx.node.name), residual


def _fused_infer(base_name: str):
    def infer(ctx: InferContext):
        base = get(base_name)
        own, activation, act_attrs = split_attrs(base, dict(ctx.node.attrs))
        node, residual = _base_node(ctx, base, base_name, own)
        count = len(node.inputs)
        types = base.infer(InferContext(node, base, ctx.types[:count], ctx.values))
        if residual is not None and ctx.type(residual) != types[0]:
            ctx.fail(f"the residual Z is {ctx.type(residual)!r}, not the {base_name} output's "
                     f"{types[0]!r}: it is added without broadcasting")
        if activation:
            act = get(activation, node=ctx.node)
            act_node, act_types = _activation_types(ctx, activation, act_attrs, types[0])
            types = act.infer(InferContext(act_node, act, act_types, [None] * len(act_types)))
        return types
    return infer


def _fused_dtype(base_name: str):
    def rule(ctx: DtypeContext):
        base = get(base_name)
        own, activation, act_attrs = split_attrs(base, dict(ctx.node.attrs))
        node, residual = _base_node(ctx, base, base_name, own)
        count = len(node.inputs)
        step = DtypeContext(node, base, ctx.inputs[:count], ctx.outputs)
        dtypes = infer_dtypes(base, step)
        ctx.inputs[:count] = step.inputs
        if residual is not None and ctx.inputs[residual] is None:
            ctx.inputs[residual] = dtypes[0]  # Z is added to the output as it is
        if activation:
            act = get(activation, node=ctx.node)
            act_node, act_types = _activation_types(ctx, activation, act_attrs,
                                                    TensorType((), dtypes[0]))
            dtypes = infer_dtypes(act, DtypeContext(
                act_node, act, [None if t is None else t.dtype for t in act_types], [None]))
        return dtypes
    return rule


def _fused_attrs(base_name: str) -> dict:
    return {**get(base_name).attrs, "activation": Attr("string", ""),
            "activation_attrs": Attr("string", "{}")}


declare("FusedConv", domain="portable", inputs=("X", "W", "B?", "Z?"), outputs=("Y",),
        infer=_fused_infer("Conv"), attrs=_fused_attrs("Conv"), dtype_rule=_fused_dtype("Conv"),
        doc="Conv with bias, plus an optional residual Z, then an optional activation applied "
            "in place.")
declare("FusedGemm", domain="portable", inputs=("A", "B", "C?"), outputs=("Y",),
        infer=_fused_infer("Gemm"), attrs=_fused_attrs("Gemm"), dtype_rule=_fused_dtype("Gemm"),
        doc="Gemm, then an optional activation applied in place.")
