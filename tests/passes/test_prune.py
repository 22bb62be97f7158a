"""Dead-node pruning: before/expected graphs."""
import numpy as np

from portable.ir import GraphBuilder
from portable.passes.prune import prune
from tests.passes.structural import assert_graphs_equal


def test_drops_dead_nodes_and_unused_constants():
    b = GraphBuilder("before")
    x = b.input("x", (2, 3))
    dead_w = b.const(np.ones((3, 3), np.float32))
    used = b.const(np.full((2, 3), 2.0, np.float32))
    dead = b.op("MatMul", x, dead_w)
    b.op("Relu", dead)
    y = b.op("Mul", x, used)
    before = b.build([y])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3))
    used = e.const(np.full((2, 3), 2.0, np.float32))
    expected = e.build([e.op("Mul", x, used)])

    after = prune(before)
    assert_graphs_equal(after, expected)
    assert len(after.initializers) == 1


def test_keeps_unused_inputs_and_kept_values():
    b = GraphBuilder("g")
    x = b.input("x", (2,))
    b.input("unused", (4,))
    h = b.op("Neg", x)
    y = b.op("Relu", x)
    g = b.build([y])
    assert [n.op for n in prune(g).nodes] == ["Relu"]
    assert prune(g).input_names == ("x", "unused")
    assert [n.op for n in prune(g, keep=[h]).nodes] == ["Neg", "Relu"]


def test_returns_the_same_graph_when_nothing_is_dead():
    b = GraphBuilder("g")
    g = b.build([b.op("Relu", b.input("x", (2,)))])
    assert prune(g) is g
