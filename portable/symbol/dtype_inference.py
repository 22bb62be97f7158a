"""Dtype inference without shapes: MXNet's ``Symbol.infer_type`` before any shape is known.

Full type inference (``portable.passes.infer``) needs every shape. This walk needs none: it runs
each op's dtype rule (``OpDef.dtype_rule``, MXNet's FInferType) over the symbol DAG and unifies,
as MXNet does, so a layer's weights take its data's dtype and a Python scalar its other
operand's.

Stages: (1) seed the variables' dtypes from the caller's and from their declarations (every other
entry starts unknown); (2) sweep the op nodes in order, each rule reading the dtypes known so far
of its node's inputs and outputs and returning its outputs' (it may also fill inputs, which is how
dtypes flow backward to variables and to the outputs of earlier nodes); (3) sweep again while a
sweep learns something. Invariants: a known dtype never changes (a rule that disagrees raises
BindError naming the node); a sweep that continues learned at least one of finitely many entries,
so the walk ends. What no rule can learn stays None.

Example:
    >>> import portable as pt
    >>> fc = pt.sym.FullyConnected(pt.sym.var("x"), num_hidden=3, name="fc")
    >>> table = infer_dtypes(fc._nodes(), {"x": "float16"})
    >>> table["fc_weight"].name
    'float16'
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from portable.ir.graph import Node
from portable.ops import registry
from portable.symbol.nodes import SymNode


def infer_dtypes(nodes: Sequence[SymNode],
                 given: Mapping[str, Any]) -> dict[str, np.dtype | None]:
    """The dtype of every entry of a symbol DAG, from the variables' dtypes alone.

    Args:
        nodes: the DAG's nodes, inputs before users (``topo_nodes``).
        given: dtypes of variables by name (overriding their declared dtypes).

    Returns:
        ``{entry name: dtype or None}``: variables by name, op outputs by output name.

    Raises:
        BindError: two rules (or a rule and a given dtype) disagree, naming the node.
    """
    table: dict[str, np.dtype | None] = {}
    for node in nodes:
        if node.is_variable:
            dtype = given.get(node.name, node.dtype)
            table[node.name] = None if dtype is None else np.dtype(dtype)
        else:  # a Python scalar, too, is unknown until its consumer's rule types it
            for index in range(node.num_outputs):
                table[node.output_name(index)] = None
    steps = [(node, _ir_node(node), registry.get(node.op)) for node in nodes
             if not node.is_variable and not node.scalar]
    learned = True
    while learned:
        learned = False
        for node, ir_node, op in steps:
            if any(hasattr(v, "body_dtypes") for v in node.attrs.values()):
                learned |= _traced_node(node, table)
            else:
                learned |= _infer_node(ir_node, op, table)
    return table


def _traced_node(node: SymNode, table: dict[str, np.dtype | None]) -> bool:
    """A control-flow node of ``sym.contrib``: its output dtypes from its traced bodies' (the
    bodies are Graphs only once shapes are known)."""
    given = [table[e[0].output_name(e[1])] if e is not None else None for e in node.inputs]
    found: list = [None] * node.num_outputs
    for body in (v for v in node.attrs.values() if hasattr(v, "body_dtypes")):
        found = [a if a is not None else b for a, b in zip(found, body.body_dtypes(given))]
    learned = False
    for index, dtype in enumerate(found):
        name = node.output_name(index)
        if dtype is not None and table[name] is None:
            table[name] = dtype
            learned = True
    return learned


def _ir_node(node: SymNode) -> Node:
    inputs = tuple("" if e is None else e[0].output_name(e[1]) for e in node.inputs)
    outputs = tuple(node.output_name(i) for i in range(node.num_outputs))
    return Node(node.op, inputs, outputs, node.attrs, node.name)


def _infer_node(node: Node, op: registry.OpDef, table: dict[str, np.dtype | None]) -> bool:
    """Run one node's dtype rule into ``table``; returns whether it learned an entry."""
    ctx = registry.DtypeContext(node, op, [table[n] if n else None for n in node.inputs],
                                [table[n] for n in node.outputs])
    outputs = registry.infer_dtypes(op, ctx)
    learned = False
    for name, dtype in zip(node.inputs, ctx.inputs):
        if name and table[name] is None and dtype is not None:
            table[name] = dtype
            learned = True
    for index, (name, dtype) in enumerate(zip(node.outputs, outputs)):
        if dtype is None:
            continue
        if table[name] is None:
            table[name] = dtype
            learned = True
        elif table[name] != dtype:
            ctx.fail(f"output #{index} is {dtype.name} by the op's dtype rule, but "
                     f"{table[name].name} where it is used")
    return learned
