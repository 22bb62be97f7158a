"""Structural graph verification: every input defined before use, one producer per value,
outputs computed, in control-flow bodies too. Types are checked one layer up, by
``portable.passes.verify``, which runs the ops' type rules (those of If, Loop and Scan infer
their bodies)."""
from __future__ import annotations

from portable.errors import GraphError
from portable.ir.graph import Graph, Node


def verify_structure(graph: Graph) -> None:
    """Raise GraphError when ``graph`` reads an undefined value, defines one twice, or leaves
    an output undefined.

    Example:
        >>> verify_structure(graph)  # doctest: +SKIP
    """
    defined = set(graph.input_names) | set(graph.initializers)
    later = {out: i for i, node in enumerate(graph.nodes) for out in node.outputs if out}
    for index, node in enumerate(graph.nodes):
        for name in node.inputs:
            if not name or name in defined:
                continue
            if name in later:
                raise GraphError(
                    f"graph {graph.name!r}: node {node.name!r} (op {node.op}) reads {name!r}, "
                    f"which node #{later[name]} computes later: the graph has a cycle or is "
                    f"not in topological order")
            raise GraphError(f"graph {graph.name!r}: node {node.name!r} (op {node.op}) reads "
                             f"{name!r}, which no node, input or initializer defines")
        for out in node.outputs:
            if out and out in defined:
                raise GraphError(f"graph {graph.name!r}: value {out!r} is defined twice "
                                 f"(again by node {node.name!r})")
            defined.add(out)
    for name in graph.outputs:
        if name not in defined:
            raise GraphError(f"graph {graph.name!r}: output {name!r} is never defined")
    for node in graph.nodes:  # control-flow bodies, through nested ones
        for key, body in node.attrs.items():
            if isinstance(body, Graph):
                _verify_subgraph(node, key, body)


def _verify_subgraph(node: Node, key: str, body: Graph) -> None:
    """A body's outer-scope references are its trailing inputs and the node's (by position,
    see ``portable/ir/graph.py``); then its own structure."""
    count = len(body.captures)
    if body.input_names[len(body.inputs) - count:] != body.captures or \
            count > len(node.inputs):
        raise GraphError(f"node {node.name!r} (op {node.op}): subgraph {key!r} (graph "
                         f"{body.name!r}) captures {list(body.captures)}, which must be its "
                         f"last inputs and stand for the node's last {count} inputs")
    verify_structure(body)
