"""Network summaries and drawings (MXNet 1.x ``mx.viz``): ``print_summary`` prints MXNet's
layer table (name (type), output shape, param #, previous layer, total params) and
``plot_network`` returns a ``graphviz.Digraph`` (``pip install 'portable[viz]'``).

The table reads portable's symbol DAG, where MXNet layers are ONNX ops: ``FullyConnected`` is a
Gemm (after a Flatten helper node that the table folds into it), ``Convolution`` a Conv,
``BatchNorm`` a BatchNormalization. Parameter counts follow MXNet's formulas, quirks included
(a FullyConnected counts its input's axis 1 as its fan-in, and BatchNorm's 2 * channels only
when shapes are given), so the totals equal MXNet's for the same network.

Example:
    >>> import portable as mx
    >>> net = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=10, name="fc1")
    >>> mx.viz.print_summary(net, shape={"data": (1, 20)})  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import MissingDependencyError, PortableError
from portable.symbol.nodes import SymNode, topo_nodes
from portable.symbol.symbol import Symbol

# portable op -> the MXNet layer type shown in the table
_MXNET_TYPES = {"Gemm": "FullyConnected", "Conv": "Convolution",
                "BatchNormalization": "BatchNorm", "MaxPool": "Pooling", "AveragePool": "Pooling",
                "GlobalMaxPool": "Pooling", "GlobalAveragePool": "Pooling"}
_WEIGHT_SUFFIXES = ("_weight", "_bias", "_beta", "_gamma", "_moving_var", "_moving_mean",
                    "_running_var", "_running_mean")


def _is_helper(node: SymNode, consumers: dict[int, list[SymNode]]) -> bool:
    """A node a layer function adds inside one MXNet layer (FullyConnected's Flatten, a
    converter's ``<node>/<what>`` node): the table folds it into its consumer."""
    users = consumers.get(id(node), [])
    if "/" in node.name:
        return True
    return (node.op == "Flatten" and len(users) == 1
            and node.name == f"{users[0].name}_flatten")


class _Graph:
    """The symbol's nodes in MXNet's order, with helper and constant nodes seen through."""

    def __init__(self, symbol: Symbol, shape: dict | None) -> None:
        if not isinstance(symbol, Symbol):
            raise PortableError(f"viz needs a Symbol, got {type(symbol).__name__}")
        self.symbol = symbol
        everything = topo_nodes(symbol._entries)
        consumers: dict[int, list[SymNode]] = {}
        for node in everything:
            for entry in node.inputs:
                if entry is not None:
                    consumers.setdefault(id(entry[0]), []).append(node)
        self.helpers = {id(n) for n in everything if not n.is_variable and _is_helper(n, consumers)}
        self.nodes = [n for n in everything if id(n) not in self.helpers and n.op != "Constant"]
        self.index = {id(n): i for i, n in enumerate(self.nodes)}
        head, head_output = symbol._entries[0]
        # MXNet reads ``set(heads[0])`` = {head node, output index, version 0} as node ids
        self.heads = {self.index.get(id(head), -1), head_output, 0}
        self.shapes: dict[str, tuple] = {}
        if shape is not None:
            internals = symbol.get_internals()
            _, out_shapes, _ = internals.infer_shape(**shape)
            if out_shapes is None:
                raise PortableError("print_summary: the input shapes are incomplete")
            self.shapes = {n: tuple(s) for n, s in zip(internals.list_outputs(), out_shapes)}

    def inputs(self, node: SymNode) -> list[SymNode]:
        """The node's input nodes, looking through helper nodes to their first input."""
        found = []
        for entry in node.inputs:
            if entry is None:
                continue
            source = entry[0]
            while id(source) in self.helpers and source.inputs and source.inputs[0] is not None:
                source = source.inputs[0][0]
            if source.op != "Constant":
                found.append(source)
        return found

    def out_shape(self, node: SymNode) -> tuple:
        return self.shapes.get(node.output_name(0), ())

    def param_shape(self, node: SymNode, suffix: str) -> tuple | None:
        for source in self.inputs(node):
            if source.is_variable and source.name.endswith(suffix):
                if source.name in self.shapes:
                    return self.shapes[source.name]
                return source.shape
        return None


def _hint(node: SymNode, graph: _Graph, suffix: str, key: str) -> Any:
    """A layer argument (num_hidden, num_filter) kept in its parameter's shape hint."""
    for source in graph.inputs(node):
        if source.is_variable and source.name.endswith(suffix) and source.shape_hint:
            return source.shape_hint[2].get(key)
    shape = graph.param_shape(node, suffix)
    return shape[0] if shape else None


def _has_bias(node: SymNode, graph: _Graph) -> bool:
    return len([e for e in node.inputs if e is not None]) >= 3


def _param_count(node: SymNode, graph: _Graph, pre_filter: int) -> int:
    """MXNet's parameter count of one layer (FullyConnected, Convolution, BatchNorm)."""
    kind = _MXNET_TYPES.get(node.op)
    if kind == "FullyConnected":
        hidden = int(_hint(node, graph, "_weight", "units") or 0)
        return (pre_filter + (1 if _has_bias(node, graph) else 0)) * hidden
    if kind == "Convolution":
        filters = int(_hint(node, graph, "_weight", "filters") or 0)
        count = pre_filter * filters // int(node.attrs.get("group", 1))
        for k in node.attrs.get("kernel_shape", []):
            count *= int(k)
        return count + (filters if _has_bias(node, graph) else 0)
    if kind == "BatchNorm" and graph.shapes:
        shape = graph.out_shape(node)
        return int(shape[1]) * 2 if len(shape) > 1 else 0
    return 0


def print_summary(symbol: Symbol, shape: dict | None = None, line_length: int = 120,
                  positions: Sequence[float] = (.44, .64, .74, 1.)) -> None:
    """Print the layer table of ``symbol``.

    Args:
        symbol: the network.
        shape: input name -> shape; without it, no shapes are shown and counts that need them
            are 0, as in MXNet.
        line_length: the table's width.
        positions: where the columns end, as fractions of ``line_length`` or absolute.
    """
    graph = _Graph(symbol, shape)
    if positions[-1] <= 1:
        positions = [int(line_length * p) for p in positions]

    def row(fields: Sequence[Any]) -> None:
        line = ""
        for field, end in zip(fields, positions):
            line = (line + str(field))[:end]
            line += " " * (end - len(line))
        print(line)

    print("_" * line_length)
    row(["Layer (type)", "Output Shape", "Param #", "Previous Layer"])
    print("=" * line_length)
    total = 0
    for i, node in enumerate(graph.nodes):
        if node.is_variable and i > 0:
            continue
        previous, pre_filter = [], 0
        if not node.is_variable:
            for source in graph.inputs(node):
                if not source.is_variable or graph.index.get(id(source)) in graph.heads:
                    previous.append(source.name)
                    key = source.name if source.is_variable else source.output_name(0)
                    if key in graph.shapes:
                        pre_filter += int(graph.shapes[key][1:][0])
        shown = () if node.is_variable and i not in graph.heads else graph.out_shape(node)
        params = _param_count(node, graph, pre_filter)
        kind = "null" if node.is_variable else _MXNET_TYPES.get(node.op, node.op)
        row([f"{node.name}({kind})", "x".join(str(d) for d in shown[1:]), params,
             previous[0] if previous else ""])
        for name in previous[1:]:
            row(["", "", "", name])
        total += params
        print("=" * line_length if i == len(graph.nodes) - 1 else "_" * line_length)
    print(f"Total params: {total}")
    print("_" * line_length)


_COLORS = ("#8dd3c7", "#fb8072", "#ffffb3", "#bebada", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5")
_FILL = {"FullyConnected": 1, "Convolution": 1, "BatchNorm": 3, "Relu": 2, "Sigmoid": 2,
         "Tanh": 2, "Softplus": 2, "LeakyRelu": 2, "Pooling": 4, "Concat": 5, "Flatten": 5,
         "Reshape": 5, "Softmax": 6}


def plot_network(symbol: Symbol, title: str = "plot", save_format: str = "pdf",
                 shape: dict | None = None, dtype: dict | None = None,
                 node_attrs: dict | None = None, hide_weights: bool = True) -> Any:
    """A ``graphviz.Digraph`` of the network (render it with ``.render()`` or ``.view()``).

    Args:
        symbol: the network.
        title: the graph's name.
        save_format: the format ``render`` writes (pdf, png, svg ...).
        shape: input name -> shape, to label the edges with shapes.
        dtype: input name -> dtype, to add the types to the edge labels.
        node_attrs: graphviz node attributes overriding the defaults.
        hide_weights: leave out weight, bias and statistics variables.

    Raises:
        MissingDependencyError: the graphviz Python package is not installed.
    """
    try:
        from graphviz import Digraph
    except ImportError as exc:
        raise MissingDependencyError(f"plot_network needs the graphviz package ({exc}); install "
                                     f"it with: pip install 'portable[viz]'") from exc
    graph = _Graph(symbol, shape)
    types: dict[str, Any] = {}
    if dtype is not None:
        internals = symbol.get_internals()
        _, out_types, _ = internals.infer_type(**dtype)
        types = dict(zip(internals.list_outputs(), out_types))
    attrs = {"shape": "box", "fixedsize": "true", "width": "1.3", "height": "0.8034",
             "style": "filled", **(node_attrs or {})}
    dot = Digraph(name=title, format=save_format)
    hidden = set()
    for node in graph.nodes:
        attr = dict(attrs)
        label = node.name
        if node.is_variable:
            if node.name.endswith(_WEIGHT_SUFFIXES):
                if hide_weights:
                    hidden.add(node.name)
                    continue
            attr.update(shape="oval", fillcolor=_COLORS[0])
        else:
            kind = _MXNET_TYPES.get(node.op, node.op)
            attr["fillcolor"] = _COLORS[_FILL.get(kind, 7)]
            if kind == "FullyConnected":
                label = f"FullyConnected\n{_hint(node, graph, '_weight', 'units')}"
            elif kind == "Convolution":
                kernel = "x".join(str(k) for k in node.attrs.get("kernel_shape", []))
                stride = "x".join(str(s) for s in node.attrs.get("strides", [])) or "1"
                label = (f"Convolution\n{kernel}/{stride}, "
                         f"{_hint(node, graph, '_weight', 'filters')}")
            elif kind != node.name:
                label = f"{kind}\n{node.name}"
        dot.node(name=node.name, label=label, **attr)
    for node in graph.nodes:
        if node.is_variable:
            continue
        for source in graph.inputs(node):
            if source.name in hidden:
                continue
            key = source.name if source.is_variable else source.output_name(0)
            label = "x".join(str(d) for d in graph.shapes[key][1:]) if key in graph.shapes \
                else ""
            if key in types:
                label += f"({np.dtype(types[key]).name})"
            dot.edge(tail_name=node.name, head_name=source.name, dir="back", arrowtail="open",
                     label=label)
    return dot


__all__ = ["plot_network", "print_summary"]
