"""The verifier the pass pipeline runs after every pass in debug mode: the graph's structure
(``portable.ir.verify``) and every node's types against its op's rule.

Example:
    >>> verify(graph)  # doctest: +SKIP
"""
from __future__ import annotations

from portable.ir.graph import Graph
from portable.ir.verify import verify_structure
from portable.passes.infer import infer_types


def verify(graph: Graph) -> None:
    """Raise GraphError (structure) or ShapeError (types) when ``graph`` is malformed."""
    verify_structure(graph)
    infer_types(graph)
