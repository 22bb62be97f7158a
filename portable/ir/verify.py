"""Structural graph verification: every input defined before use, one producer per value,
outputs computed. Types are checked one layer up, by ``portable.passes.verify``, which runs the
ops' type rules."""
from __future__ import annotations

from portable.errors import GraphError
from portable.ir.graph import Graph


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
