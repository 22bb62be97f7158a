"""Bridges between IR graphs and the Symbol API, for ``import_model`` and ``export_model``.

Example:
    >>> symbol = graph_to_symbol(graph)          # doctest: +SKIP
    >>> graph, params = symbol_graph(symbol, {"data": (1, 784)}, arg_params)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from portable.errors import BindError
from portable.ir.graph import Graph
from portable.symbol.symbol import SymNode, Symbol


def graph_to_symbol(graph: Graph) -> Symbol:
    """A Symbol computing ``graph``: inputs become variables (with their static shapes),
    constants become Constant nodes, nodes keep their names and attributes."""
    entries: dict[str, tuple[SymNode, int]] = {}
    for name, type_ in graph.inputs:
        node = SymNode(None, name, shape=type_.shape if type_.is_static else None,
                       dtype=type_.dtype)
        entries[name] = (node, 0)
    for name, value in graph.initializers.items():
        entries[name] = (SymNode("Constant", f"{name}_const", {"value": np.asarray(value)}), 0)
    for node in graph.nodes:
        sym = SymNode(node.op, node.name, dict(node.attrs),
                      [entries[i] if i else None for i in node.inputs], len(node.outputs))
        for index, out in enumerate(node.outputs):
            if out:
                entries[out] = (sym, index)
    return Symbol([entries[name] for name in graph.outputs])


def _host(value: Any) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)


def symbol_graph(symbol: Symbol, params: Mapping[str, Any],
                 input_shapes: Mapping[str, Any] | None = None,
                 input_types: Mapping[str, Any] | None = None) -> tuple[Graph, dict]:
    """Lower ``symbol`` with the shapes its parameters and ``input_shapes`` give.

    Returns:
        The graph and the parameters as host arrays (only those the symbol uses).
    """
    host = {name: _host(value) for name, value in params.items()}
    names = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    host = {name: value for name, value in host.items() if name in names}
    shapes = {name: value.shape for name, value in host.items()}
    dtypes = {name: value.dtype for name, value in host.items()}
    shapes.update({k: tuple(v) for k, v in (input_shapes or {}).items()})
    dtypes.update({k: np.dtype(v) for k, v in (input_types or {}).items()})
    missing = [n for n in symbol.list_arguments() if n not in shapes]
    try:
        graph = symbol.to_graph(shapes, dtypes, name="portable")
    except BindError as exc:
        raise BindError(f"export needs the shape of every input that is not a parameter "
                        f"({', '.join(missing)}): pass input_shapes={{name: shape}}; {exc}"
                        ) from exc
    return graph, host
