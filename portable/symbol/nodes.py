"""The symbol DAG: ``SymNode``s joined by (node, output index) entries, MXNet-style automatic
names, and a topological walk. ``Symbol`` (``symbol.py``) wraps a list of entries; the JSON form
(``serialize.py``) and the lowering to the IR read the DAG from here.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

from portable import name as naming
from portable.errors import GraphError


_SERIALS = itertools.count()


@dataclass(eq=False)
class SymNode:
    """A node of the symbol DAG. ``op`` is None for a variable."""

    op: str | None
    name: str
    attrs: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)  # of (SymNode, output index) or None
    num_outputs: int = 1
    # variables only: declared shape / dtype, and a rule deriving the shape from another entry
    shape: tuple | None = None
    dtype: Any = None
    shape_hint: tuple | None = None  # (rule name, (SymNode, index), params)
    var_attrs: dict = field(default_factory=dict)
    scalar: bool = False  # a Python scalar: typed like the other operand of its consumer
    # creation order: a control-flow body traced by ``sym.contrib`` owns the nodes created
    # while its Python function ran; older ones belong to the enclosing scope (captures)
    serial: int = field(default_factory=lambda: next(_SERIALS), repr=False)

    @property
    def is_variable(self) -> bool:
        return self.op is None

    def output_name(self, index: int) -> str:
        if self.is_variable:
            return self.name
        return f"{self.name}_output" if self.num_outputs == 1 else f"{self.name}_output{index}"


def auto_name(op: str, name: str | None = None) -> str:
    """A node's name from the active ``portable.name`` manager: ``name`` if given (with the
    ``Prefix`` in force), else MXNet-style ``fullyconnected0``, ``fullyconnected1``..."""
    return naming.current().get(name, op.rsplit(".", 1)[-1].lower())


def topo_nodes(entries: Iterable[tuple[SymNode, int]]) -> list[SymNode]:
    """Every node reachable from ``entries``, inputs before users (iterative DFS)."""
    order: list[SymNode] = []
    state: dict[int, int] = {}  # id -> 1 visiting, 2 done
    stack = [(node, False) for node, _ in reversed(list(entries))]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            state[key] = 2
            order.append(node)
            continue
        if state.get(key) == 2:
            continue
        if state.get(key) == 1:
            raise GraphError(f"symbol graph has a cycle through {node.name!r}")
        state[key] = 1
        stack.append((node, True))
        for entry in reversed(node.inputs):
            if entry is not None and state.get(id(entry[0])) != 2:
                if state.get(id(entry[0])) == 1:
                    raise GraphError(f"symbol graph has a cycle through {entry[0].name!r}")
                stack.append((entry[0], False))
    return order
