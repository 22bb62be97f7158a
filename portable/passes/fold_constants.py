"""Constant folding: evaluate every node whose inputs are all constants, once, at compile time.

Stages: (1) infer types with unlimited constant propagation, which evaluates (with the
reference kernels) every node whose inputs' values are known, and applies fold rules (Shape
of a static shape); random ops are never evaluated; (2) drop the nodes whose outputs are all
known; (3) the known values that remaining nodes or graph outputs read become initializers.
Weights built by a constant subgraph (ConstantOfShape, Reshape of a constant) become plain
initializers, counted as weights by the memory planner.

Example:
    >>> folded = fold_constants(graph)  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import Graph
from portable.passes.infer import infer_types

UNLIMITED = 1 << 62


def fold_constants(graph: Graph, limit: int = UNLIMITED) -> Graph:
    """Returns ``graph`` with its constant subgraphs replaced by initializers.

    Args:
        graph: the graph.
        limit: largest value (in elements) to fold.

    Returns:
        The folded graph (``graph`` itself when nothing folds).
    """
    info = infer_types(graph, fold_limit=limit)
    known = info.values
    nodes = tuple(node for node in graph.nodes
                  if not all(not out or out in known for out in node.outputs))
    if len(nodes) == len(graph.nodes):
        return graph
    read = {name for node in nodes for name in node.inputs if name} | set(graph.outputs)
    inputs = set(graph.input_names)
    initializers = dict(graph.initializers)
    for name in read:
        if name in known and name not in inputs and name not in initializers:
            value = np.asarray(known[name])
            value.setflags(write=False)  # so Graph keeps it as is instead of copying it
            initializers[name] = value
    return graph.replace(nodes=nodes, initializers=initializers)
