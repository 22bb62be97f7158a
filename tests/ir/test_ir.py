"""The IR: immutability, printing, verification and its error messages."""
import dataclasses

import numpy as np
import pytest

from portable.errors import GraphError
from portable.ir import (Graph, GraphBuilder, Node, TensorType, format_graph, toposort,
                         verify_structure)


def small_graph():
    b = GraphBuilder("small")
    x = b.input("x", (2, 3))
    w = b.const(np.ones((3, 4), np.float32), name="w")
    h = b.op("MatMul", x, w, outputs=["h"])
    b.op("Relu", h, outputs=["y"])
    return b.build(["y"])


def test_nodes_and_graphs_are_immutable():
    g = small_graph()
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes[0].op = "Add"
    with pytest.raises(TypeError):
        g.nodes[0].attrs["x"] = 1
    with pytest.raises(ValueError):
        g.initializers["w"][0, 0] = 5.0


def test_printer_shows_every_node_with_types():
    from portable.passes.infer import infer_types

    g = small_graph()
    text = format_graph(g, infer_types(g).types)
    assert "graph small(x: float32[2x3])" in text
    assert "%h = MatMul(x, w)  # float32[2x4]" in text
    assert "%y = Relu(%h)  # float32[2x4]" in text


def test_verify_accepts_a_good_graph():
    verify_structure(small_graph())


def test_verify_names_a_dangling_input():
    g = Graph(nodes=(Node("Relu", ("ghost",), ("y",)),), inputs=(), outputs=("y",))
    with pytest.raises(GraphError, match="'ghost'.*no node, input or initializer"):
        verify_structure(g)


def test_verify_names_a_cycle():
    nodes = (Node("Relu", ("b",), ("a",), name="first"), Node("Relu", ("a",), ("b",)))
    g = Graph(nodes=nodes, inputs=(), outputs=("b",))
    with pytest.raises(GraphError, match="cycle"):
        verify_structure(g)
    with pytest.raises(GraphError, match="cycle"):
        toposort(nodes, [])


def test_toposort_orders_shuffled_nodes():
    g = small_graph()
    shuffled = list(reversed(g.nodes))
    assert toposort(shuffled, ["x", "w"]) == list(g.nodes)


def test_duplicate_definition_is_refused():
    nodes = (Node("Relu", ("x",), ("y",)), Node("Neg", ("x",), ("y",)))
    g = Graph(nodes=nodes, inputs=(("x", TensorType((2,))),), outputs=("y",))
    with pytest.raises(GraphError, match="defined twice"):
        verify_structure(g)
