"""Common-subexpression elimination: compute each distinct expression once.

Two nodes are the same expression when they have the same op, the same inputs and equal
attributes; the later one is dropped and its outputs renamed to the earlier one's. Random ops
(``OpDef.random``) are never merged: two Dropouts draw two masks. Equal small constants are
merged first, so that expressions reading equal constants under different names merge too.
A node whose outputs include a graph output is kept (renaming it would change the interface).
Control-flow nodes compare their bodies as attributes, by identity first (``_key``: a Graph
hashes by identity); renaming a value a body captures renames only the node's input, since
bodies bind captured values by position (``portable/ir/graph.py``).

Example:
    >>> deduplicated = eliminate_common_subexpressions(graph)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from portable.ir.graph import Graph
from portable.ops import registry

# Constants up to this many elements are compared by value (hashing big weights is not free).
CONSTANT_LIMIT = 1 << 12


def _key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    if isinstance(value, float) and value != value:
        return ("nan",)
    return value


def eliminate_common_subexpressions(graph: Graph, keep: Iterable[str] = ()) -> Graph:
    """Returns ``graph`` with duplicate expressions (and duplicate small constants) merged.

    Args:
        graph: the graph.
        keep: values that must keep their name (besides graph outputs and inputs).

    Returns:
        The graph (``graph`` itself when nothing merged).
    """
    fixed = set(graph.outputs) | set(keep)
    renames: dict[str, str] = {}
    first_constant: dict[Any, str] = {}
    for name, value in graph.initializers.items():
        if value.size <= CONSTANT_LIMIT and name not in fixed:
            renames[name] = first_constant.setdefault(_key(value), name)
    renames = {k: v for k, v in renames.items() if k != v}
    seen: dict[Any, tuple[str, ...]] = {}
    nodes = []
    for node in graph.nodes:
        inputs = tuple(renames.get(name, name) for name in node.inputs)
        if inputs != node.inputs:
            node = node.replace(inputs=inputs)
        op = registry.get(node.op, node=node)
        if op.random:
            nodes.append(node)
            continue
        key = (node.op, inputs, len(node.outputs),
               tuple(sorted((k, _key(v)) for k, v in node.attrs.items())))
        earlier = seen.get(key)
        if earlier is None or any(out in fixed for out in node.outputs if out):
            seen.setdefault(key, node.outputs)
            nodes.append(node)
            continue
        if any(out and not same for out, same in zip(node.outputs, earlier)):
            nodes.append(node)  # the earlier node did not compute an optional output
            continue
        renames.update((out, same) for out, same in zip(node.outputs, earlier) if out)
    if not renames:
        return graph
    initializers = {k: v for k, v in graph.initializers.items() if k not in renames}
    return graph.replace(nodes=tuple(nodes), initializers=initializers)
