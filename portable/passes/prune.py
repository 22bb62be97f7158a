"""Dead-node pruning: drop the nodes whose outputs no graph output depends on, and the
constants nothing reads.

One backward walk from the graph outputs (and the values in ``keep``) marks what is needed;
a node is needed when any of its outputs is. Graph inputs stay, even unused: they are the
graph's interface. Ops have no side effects besides their outputs (state updates are outputs),
so nothing else is kept. A control-flow node lists the outer values its bodies read as inputs
(``portable/ir/graph.py``), so what a body needs is kept like any other input; bodies are
left as they are (an unused body output still fixes the node's interface).

Example:
    >>> pruned = prune(graph)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Iterable

from portable.ir.graph import Graph


def prune(graph: Graph, keep: Iterable[str] = ()) -> Graph:
    """Returns ``graph`` without dead nodes and unused initializers.

    Args:
        graph: the graph.
        keep: values to keep computing besides the graph outputs.

    Returns:
        The pruned graph (``graph`` itself when nothing was dead).
    """
    needed = set(graph.outputs) | set(keep)
    alive = []
    for node in reversed(graph.nodes):
        if any(out in needed for out in node.outputs if out):
            alive.append(node)
            needed.update(name for name in node.inputs if name)
    alive.reverse()
    initializers = {k: v for k, v in graph.initializers.items() if k in needed}
    if len(alive) == len(graph.nodes) and len(initializers) == len(graph.initializers):
        return graph
    return graph.replace(nodes=tuple(alive), initializers=initializers)
