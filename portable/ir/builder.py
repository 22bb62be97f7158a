"""A small builder for graphs, used by tests, front ends and importers.

Example:
    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (8, 4))
    >>> w = b.const(np.ones((4, 2), np.float32))
    >>> y = b.op("Relu", b.op("MatMul", x, w))
    >>> g = b.build([y])
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from portable.errors import GraphError
from portable.ir.graph import Graph, Node, TensorType


class GraphBuilder:
    """Accumulates inputs, constants and nodes; ``build`` returns the immutable Graph."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[tuple[str, TensorType]] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self._count = 0

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def input(self, name: str, shape: Sequence[int | None], dtype: Any = "float32") -> str:
        self.inputs.append((name, TensorType(shape, dtype)))
        return name

    def const(self, value: Any, name: str | None = None) -> str:
        name = name or self._fresh("c")
        self.initializers[name] = np.asarray(value)
        return name

    def op(self, op: str, *inputs: str | None, outputs: int | Sequence[str] = 1,
           name: str = "", **attrs: Any) -> Any:
        """Add a node; returns its output name, or a tuple of names for several outputs."""
        if isinstance(outputs, int):
            outs = tuple(self._fresh("v") for _ in range(outputs))
        else:
            outs = tuple(outputs)
        self.nodes.append(Node(op, tuple(i or "" for i in inputs), outs, attrs, name))
        return outs[0] if len(outs) == 1 else outs

    def build(self, outputs: Iterable[str]) -> Graph:
        return Graph(nodes=tuple(self.nodes), inputs=tuple(self.inputs),
                     outputs=tuple(outputs), initializers=dict(self.initializers),
                     name=self.name)


def toposort(nodes: Sequence[Node], available: Iterable[str]) -> list[Node]:
    """Order ``nodes`` so every input is defined before use (Kahn's algorithm, stable).

    Raises GraphError naming the nodes on a cycle or reading an undefined value.
    """
    producer = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}
    ready_values = set(available)
    waiting = {}
    users: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        deps = {producer[name] for name in node.inputs
                if name and name not in ready_values and name in producer}
        missing = [name for name in node.inputs
                   if name and name not in ready_values and name not in producer]
        if missing:
            raise GraphError(f"node {node.name!r} (op {node.op}) reads {missing[0]!r}, which "
                             f"no node, input or initializer defines")
        waiting[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    import heapq

    queue = [i for i, count in waiting.items() if count == 0]
    heapq.heapify(queue)
    order = []
    while queue:
        i = heapq.heappop(queue)
        order.append(nodes[i])
        for user in users.get(i, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(queue, user)
    if len(order) != len(nodes):
        stuck = [nodes[i].name for i, count in waiting.items() if count > 0]
        raise GraphError(f"the graph has a cycle through node(s) {', '.join(stuck[:5])}")
    return order
