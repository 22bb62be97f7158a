"""Private fused ops that the optimisation passes create (never exported as such).

- ``portable.FusedElementwise``: a chain of elementwise ops evaluated into one output buffer.
  Its ``body`` attribute holds the chain as JSON, one step per op:
  ``[{"op": "Mul", "inputs": [0, 1], "attrs": {}}, {"op": "Relu", "inputs": [-1]}]``; an
  input ``i >= 0`` is the fused node's input ``i``, ``-1`` the previous step's output. Every
  step has the output's type, and every step after the first reads the previous one through an
  input that its op may overwrite in place, so a kernel can run the chain inside the output.
- ``portable.FusedConv`` and ``portable.FusedGemm``: Conv (with bias) or Gemm followed by an
  activation run in place on the result. ``activation`` names a single-input elementwise op
  that declares the in-place pair (0, 0) (``""``: none) and ``activation_attrs`` holds its
  attributes as JSON.

Type rules delegate to the declarations of the ops they combine, so there is one rule per op.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from portable.backend import PreparedKernel, bound_kernel
from portable.ir.graph import Node
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


@functools.lru_cache(maxsize=256)
def _activation_attrs(name: str, attrs_json: str) -> dict:
    op = get(name)
    return op.resolve_attrs(Node(name, ("x",), ("y",), json.loads(attrs_json), f"fused/{name}"))


def composed_kernel(base_name: str) -> PreparedKernel:
    """A FusedConv/FusedGemm kernel for any backend: the backend's own kernel of the base op,
    then its activation kernel in place on the output (a backend with a truly fused kernel
    registers that instead). Both are looked up and prepared once per plan step."""
    base = get(base_name)

    def prepare(backend, input_types, output_types, attrs):
        own, activation, _ = split_attrs(base, attrs)
        first = bound_kernel(backend.kernel(base_name), backend, input_types, output_types,
                             own)
        if not activation:
            return first, own, None, None
        act_attrs = _activation_attrs(activation, attrs["activation_attrs"] or "{}")
        then = bound_kernel(backend.kernel(activation), backend, output_types[:1],
                            output_types[:1], act_attrs)
        return first, own, then, act_attrs

    def run(state, ctx, inputs, outputs, attrs):
        first, own, then, act_attrs = state
        first(ctx, inputs, outputs, own)
        if then is not None:
            then(ctx, [outputs[0]], [outputs[0]], act_attrs)
    run.__name__ = f"fused_{base_name.lower()}"
    return PreparedKernel(run, prepare)


def _fused_infer(base_name: str):
    def infer(ctx: InferContext):
        base = get(base_name)
        own, activation, act_attrs = split_attrs(base, dict(ctx.node.attrs))
        node = Node(base_name, ctx.node.inputs, ctx.node.outputs, own, ctx.node.name)
        types = base.infer(InferContext(node, base, ctx.types, ctx.values))
        if activation:
            act = get(activation, node=ctx.node)
            act_node = Node(activation, ("x",), ("y",), act_attrs, f"{ctx.node.name}/act")
            types = act.infer(InferContext(act_node, act, [types[0]], [None]))
        return types
    return infer


def _fused_dtype(base_name: str):
    def rule(ctx: DtypeContext):
        base = get(base_name)
        own, activation, act_attrs = split_attrs(base, dict(ctx.node.attrs))
        node = Node(base_name, ctx.node.inputs, ctx.node.outputs, own, ctx.node.name)
        step = DtypeContext(node, base, ctx.inputs, ctx.outputs)
        dtypes = infer_dtypes(base, step)
        ctx.inputs[:] = step.inputs
        if activation:
            act = get(activation, node=ctx.node)
            act_node = Node(activation, ("x",), ("y",), act_attrs, f"{ctx.node.name}/act")
            dtypes = infer_dtypes(act, DtypeContext(act_node, act, dtypes[:1], [None]))
        return dtypes
    return rule


def _fused_attrs(base_name: str) -> dict:
    return {**get(base_name).attrs, "activation": Attr("string", ""),
            "activation_attrs": Attr("string", "{}")}


declare("FusedConv", domain="portable", inputs=("X", "W", "B?"), outputs=("Y",),
        infer=_fused_infer("Conv"), attrs=_fused_attrs("Conv"), dtype_rule=_fused_dtype("Conv"),
        doc="Conv with bias, then an optional activation applied in place.")
declare("FusedGemm", domain="portable", inputs=("A", "B", "C?"), outputs=("Y",),
        infer=_fused_infer("Gemm"), attrs=_fused_attrs("Gemm"), dtype_rule=_fused_dtype("Gemm"),
        doc="Gemm, then an optional activation applied in place.")
